/*
 * consumer.c - the consumer side of the transport (see kafka.h).
 *
 * A consumer-group member that hands out decoded records, skips (and counts) messages
 * that do not decode, and stores an offset only when the caller marks a record done.
 * librdkafka's auto-commit then commits what was stored; close commits the rest.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/kafka.h"
#include "cmr/log.h"
#include "cmr/wire.h"
#include "kafka_internal.h"

struct cmr_consumer {
    rd_kafka_t *rk;
    cmr_rebalance_cb_t *rebalance_cb;
    void *cb_opaque;
    uint64_t received, rejected, done, rebalances;
};

#define ERRF(...)                                  \
    do {                                           \
        if (errbuf && errlen)                      \
            snprintf(errbuf, errlen, __VA_ARGS__); \
    } while (0)

static void consumer_rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *parts,
                                  void *opaque)
{
    cmr_consumer_t *c = opaque;
    int revoked = err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS;
    c->rebalances++;
    cmr_log(CMR_LOG_INFO, revoked ? "kafka.partitions_revoked" : "kafka.partitions_assigned",
            "client=%s count=%d protocol=%s", rd_kafka_name(rk), parts->cnt, rd_kafka_rebalance_protocol(rk));
    if (c->rebalance_cb)
        c->rebalance_cb(c, revoked, parts, c->cb_opaque);
    if (revoked) /* hand over what was processed before the partitions go elsewhere */
        rd_kafka_commit(rk, NULL, 0);
    rd_kafka_error_t *error = NULL;
    rd_kafka_resp_err_t rerr = RD_KAFKA_RESP_ERR_NO_ERROR;
    if (strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0)
        error = revoked ? rd_kafka_incremental_unassign(rk, parts) : rd_kafka_incremental_assign(rk, parts);
    else
        rerr = rd_kafka_assign(rk, revoked ? NULL : parts);
    if (error) {
        cmr_log(CMR_LOG_ERROR, "kafka.assign_failed", "error=\"%s\"", rd_kafka_error_string(error));
        rd_kafka_error_destroy(error);
    } else if (rerr) {
        cmr_log(CMR_LOG_ERROR, "kafka.assign_failed", "error=\"%s\"", rd_kafka_err2str(rerr));
    }
}

cmr_consumer_t *cmr_consumer_new(const cmr_conf_t *conf, const char *group_id, const char *const *topics,
                                 size_t ntopics, cmr_rebalance_cb_t *rebalance_cb, void *cb_opaque, char *errbuf,
                                 size_t errlen)
{
    if (cmr_wire_init() != 0) {
        ERRF("wire contracts failed to initialize");
        return NULL;
    }
    cmr_consumer_t *c = calloc(1, sizeof *c);
    if (!c) {
        ERRF("out of memory");
        return NULL;
    }
    c->rebalance_cb = rebalance_cb;
    c->cb_opaque = cb_opaque;
    rd_kafka_conf_t *rk_conf = cmr_kafka_conf(conf, errbuf, errlen);
    if (!rk_conf)
        goto fail;
    char err[512];
    if (rd_kafka_conf_set(rk_conf, "group.id", group_id, err, sizeof err) != RD_KAFKA_CONF_OK ||
        rd_kafka_conf_set(rk_conf, "enable.auto.offset.store", "false", err, sizeof err) != RD_KAFKA_CONF_OK) {
        ERRF("%s", err);
        rd_kafka_conf_destroy(rk_conf);
        goto fail;
    }
    if (cmr_kafka_conf_default(rk_conf, conf, "auto.offset.reset", "earliest", errbuf, errlen) ||
        cmr_kafka_conf_default(rk_conf, conf, "enable.auto.commit", "true", errbuf, errlen) ||
        cmr_kafka_conf_default(rk_conf, conf, "auto.commit.interval.ms", "1000", errbuf, errlen) ||
        cmr_kafka_conf_default(rk_conf, conf, "fetch.message.max.bytes", "16777216", errbuf, errlen)) {
        rd_kafka_conf_destroy(rk_conf);
        goto fail;
    }
    rd_kafka_conf_set_rebalance_cb(rk_conf, consumer_rebalance_cb);
    rd_kafka_conf_set_opaque(rk_conf, c);
    c->rk = rd_kafka_new(RD_KAFKA_CONSUMER, rk_conf, err, sizeof err);
    if (!c->rk) {
        ERRF("cannot create consumer: %s", err);
        rd_kafka_conf_destroy(rk_conf);
        goto fail;
    }
    rd_kafka_poll_set_consumer(c->rk);
    rd_kafka_topic_partition_list_t *subs = rd_kafka_topic_partition_list_new((int)ntopics);
    for (size_t i = 0; i < ntopics; i++)
        rd_kafka_topic_partition_list_add(subs, topics[i], RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t rerr = rd_kafka_subscribe(c->rk, subs);
    rd_kafka_topic_partition_list_destroy(subs);
    if (rerr) {
        ERRF("cannot subscribe: %s", rd_kafka_err2str(rerr));
        rd_kafka_destroy(c->rk);
        goto fail;
    }
    return c;
fail:
    free(c);
    return NULL;
}

void cmr_record_free(cmr_record_t *rec)
{
    if (!rec)
        return;
    cmr_msg_free(&rec->msg);
    if (rec->raw)
        rd_kafka_message_destroy(rec->raw);
    free(rec->key_copy);
    free(rec);
}

/* Skips a message that did not decode: logged, counted, and its offset stored so that it
 * is not redelivered forever. */
static void consumer_skip(cmr_consumer_t *c, rd_kafka_message_t *m, const char *why)
{
    c->rejected++;
    cmr_log(CMR_LOG_WARN, "wire.message_rejected", "topic=%s partition=%d offset=%lld bytes=%zu reason=\"%s\"",
            rd_kafka_topic_name(m->rkt), m->partition, (long long)m->offset, m->len, why);
    rd_kafka_offset_store(m->rkt, m->partition, m->offset);
}

int cmr_consumer_poll(cmr_consumer_t *c, int timeout_ms, cmr_record_t **out)
{
    *out = NULL;
    rd_kafka_message_t *m = rd_kafka_consumer_poll(c->rk, timeout_ms);
    if (!m)
        return 0;
    if (m->err) {
        int fatal = m->err == RD_KAFKA_RESP_ERR__FATAL;
        if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
            cmr_log(fatal ? CMR_LOG_ERROR : CMR_LOG_WARN, "kafka.consume_error", "error=\"%s\"",
                    rd_kafka_message_errstr(m));
        rd_kafka_message_destroy(m);
        return fatal ? -1 : 0;
    }
    cmr_record_t *rec = calloc(1, sizeof *rec);
    char why[256] = "";
    if (!rec) {
        rd_kafka_message_destroy(m);
        return 0; /* not stored: redelivered after a restart */
    }
    if (cmr_msg_decode(m->payload, m->len, &rec->msg, why, sizeof why) != CMR_WIRE_OK) {
        consumer_skip(c, m, why);
        rd_kafka_message_destroy(m);
        free(rec);
        return 0;
    }
    rec->key_copy = malloc(m->key_len + 1);
    if (!rec->key_copy) {
        cmr_msg_free(&rec->msg);
        free(rec);
        rd_kafka_message_destroy(m);
        return 0;
    }
    if (m->key_len)
        memcpy(rec->key_copy, m->key, m->key_len);
    rec->key_copy[m->key_len] = '\0';
    rec->raw = m;
    rec->topic = rd_kafka_topic_name(m->rkt);
    rec->partition = m->partition;
    rec->offset = m->offset;
    rec->key = rec->key_copy;
    rec->key_len = m->key_len;
    rec->timestamp_ms = rd_kafka_message_timestamp(m, NULL);
    c->received++;
    *out = rec;
    return 1;
}

void cmr_consumer_done(cmr_consumer_t *c, const cmr_record_t *rec)
{
    rd_kafka_resp_err_t err = rd_kafka_offset_store(rec->raw->rkt, rec->partition, rec->offset);
    if (err)
        cmr_log(CMR_LOG_WARN, "kafka.offset_store_failed", "topic=%s partition=%d offset=%lld error=\"%s\"", rec->topic,
                rec->partition, (long long)rec->offset, rd_kafka_err2str(err));
    else
        c->done++;
}

int cmr_consumer_commit(cmr_consumer_t *c)
{
    rd_kafka_resp_err_t err = rd_kafka_commit(c->rk, NULL, 0);
    if (err && err != RD_KAFKA_RESP_ERR__NO_OFFSET) {
        cmr_log(CMR_LOG_WARN, "kafka.commit_failed", "error=\"%s\"", rd_kafka_err2str(err));
        return -1;
    }
    return 0;
}

void cmr_consumer_stats(cmr_consumer_t *c, cmr_consumer_stats_t *out)
{
    out->received = c->received;
    out->rejected = c->rejected;
    out->done = c->done;
    out->rebalances = c->rebalances;
}

rd_kafka_t *cmr_consumer_handle(cmr_consumer_t *c)
{
    return c->rk;
}

void cmr_consumer_close(cmr_consumer_t *c)
{
    if (!c)
        return;
    cmr_consumer_commit(c);
    rd_kafka_resp_err_t err = rd_kafka_consumer_close(c->rk);
    if (err)
        cmr_log(CMR_LOG_WARN, "kafka.close_failed", "error=\"%s\"", rd_kafka_err2str(err));
    rd_kafka_destroy(c->rk);
    free(c);
}
