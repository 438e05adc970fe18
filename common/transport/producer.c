/*
 * producer.c - the producer side of the transport (see kafka.h).
 *
 * One rd_kafka_t per producer plus one thread that serves its delivery reports
 * (rd_kafka_poll), so callers never have to poll and never block on the network.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "cmr/bytes.h"
#include "cmr/clock.h"
#include "cmr/event.h"
#include "cmr/ids.h"
#include "cmr/kafka.h"
#include "cmr/log.h"
#include "cmr/map.h"
#include "cmr/wire.h"
#include "kafka_internal.h"

struct cmr_producer {
    rd_kafka_t *rk;
    cmr_delivery_cb_t *cb;
    void *cb_opaque;
    pthread_t poller;
    atomic_bool stop;
    _Atomic uint64_t queued, delivered, failed, queue_full, invalid;
    _Atomic int64_t all_down_ms, up_ms; /* cmr_mono_ms of the last "all brokers down", of the last delivery */
    uint64_t failed_logged;             /* failures already summarized in the log (poll thread only) */
    int64_t last_fail_log_ms;
    bool txn_ready;  /* rd_kafka_init_transactions done */
    char txn_id[64]; /* transactional.id, for messages ("" when none) */
};

#define ERRF(...) CMR_ERRF(errbuf, errlen, __VA_ARGS__)

static void producer_dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    cmr_producer_t *p = opaque;
    if (m->err) {
        p->failed++;
        /* A dead cluster fails every queued message at once: one line per second says
         * how many, instead of one line per message. */
        int64_t now_ms = cmr_mono_ms();
        if (now_ms - p->last_fail_log_ms >= 1000) {
            cmr_log(CMR_LOG_WARN, "kafka.delivery_failed",
                    "client=%s topic=%s error=\"%s\" failed_since_last_report=%llu", rd_kafka_name(rk),
                    rd_kafka_topic_name(m->rkt), rd_kafka_err2str(m->err),
                    (unsigned long long)(p->failed - p->failed_logged));
            p->failed_logged = p->failed;
            p->last_fail_log_ms = now_ms;
        }
    } else {
        p->delivered++;
        p->up_ms = cmr_mono_ms();
    }
    if (p->cb) {
        cmr_delivery_t d = {rd_kafka_topic_name(m->rkt),
                            m->partition,
                            m->offset,
                            m->err,
                            m->err ? rd_kafka_err2str(m->err) : NULL,
                            m->_private};
        p->cb(&d, p->cb_opaque);
    }
}

/* Logged as every client's errors; "all brokers down" is also kept for
 * cmr_producer_cluster_down. */
static void producer_error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    cmr_producer_t *p = opaque;
    if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
        p->all_down_ms = cmr_mono_ms();
    cmr_kafka_log_error(rk, err, reason);
}

static void producer_callbacks(rd_kafka_conf_t *rk_conf)
{
    rd_kafka_conf_set_dr_msg_cb(rk_conf, producer_dr_cb);
    rd_kafka_conf_set_error_cb(rk_conf, producer_error_cb);
}

static void *producer_poll_main(void *arg)
{
    cmr_producer_t *p = arg;
    while (!p->stop)
        rd_kafka_poll(p->rk, 100);
    return NULL;
}

cmr_producer_t *cmr_producer_new(const cmr_conf_t *conf, const char *client_id, cmr_delivery_cb_t *cb, void *cb_opaque,
                                 char *errbuf, size_t errlen)
{
    cmr_producer_t *p = cmr_kafka_client_alloc(sizeof *p, errbuf, errlen);
    if (!p)
        return NULL;
    p->cb = cb;
    p->cb_opaque = cb_opaque;
    const cmr_kafka_prop_t defaults[] = {{"enable.idempotence", "true"},
                                         {"client.id", client_id ? client_id : "cmr"},
                                         {"linger.ms", "5"},
                                         {"message.max.bytes", "16777216"},
                                         {"compression.codec", "lz4"},
                                         {NULL, NULL}};
    p->rk =
        cmr_kafka_client(RD_KAFKA_PRODUCER, conf, NULL, defaults, producer_callbacks, p, "producer", errbuf, errlen);
    if (!p->rk)
        goto fail;
    size_t idlen = sizeof p->txn_id; /* empty: not a transactional producer */
    if (rd_kafka_conf_get(rd_kafka_conf(p->rk), "transactional.id", p->txn_id, &idlen) != RD_KAFKA_CONF_OK)
        p->txn_id[0] = '\0';
    if (pthread_create(&p->poller, NULL, producer_poll_main, p) != 0) {
        ERRF("cannot start the producer's poll thread");
        rd_kafka_destroy(p->rk);
        goto fail;
    }
    return p;
fail:
    free(p);
    return NULL;
}

static int send_raw_to(cmr_producer_t *p, const char *topic, int32_t partition, const void *key, size_t key_len,
                       const void *payload, size_t len, void *opaque)
{
    rd_kafka_resp_err_t err =
        rd_kafka_producev(p->rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(partition),
                          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_KEY(key_len ? key : NULL, key_len),
                          RD_KAFKA_V_VALUE((void *)payload, len), RD_KAFKA_V_OPAQUE(opaque), RD_KAFKA_V_END);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        p->queued++;
        return CMR_SEND_OK;
    }
    if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
        p->queue_full++;
        return CMR_SEND_QUEUE_FULL;
    }
    p->failed++;
    cmr_log(CMR_LOG_WARN, "kafka.produce_failed", "topic=%s error=\"%s\"", topic, rd_kafka_err2str(err));
    return CMR_SEND_ERROR;
}

int cmr_producer_send_raw(cmr_producer_t *p, const char *topic, const void *key, size_t key_len, const void *payload,
                          size_t len, void *opaque)
{
    return send_raw_to(p, topic, RD_KAFKA_PARTITION_UA, key, key_len, payload, len, opaque);
}

int cmr_producer_partitions(cmr_producer_t *p, const char *topic, int timeout_ms)
{
    int n = 0;
    return cmr_kafka_topic_partitions(p->rk, topic, timeout_ms, &n, NULL, 0) == 1 && n > 0 ? n : -1;
}

static int send_to(cmr_producer_t *p, cmr_msg_type_t type, const void *msg, const char *topic, int32_t partition,
                   void *opaque, char *errbuf, size_t errlen);

int cmr_producer_send(cmr_producer_t *p, cmr_msg_type_t type, const void *msg, const char *topic, void *opaque,
                      char *errbuf, size_t errlen)
{
    return send_to(p, type, msg, topic, RD_KAFKA_PARTITION_UA, opaque, errbuf, errlen);
}

int cmr_producer_send_to(cmr_producer_t *p, cmr_msg_type_t type, const void *msg, int32_t partition, void *opaque,
                         char *errbuf, size_t errlen)
{
    return send_to(p, type, msg, NULL, partition, opaque, errbuf, errlen);
}

static int send_to(cmr_producer_t *p, cmr_msg_type_t type, const void *msg, const char *topic, int32_t partition,
                   void *opaque, char *errbuf, size_t errlen)
{
    if (!topic) {
        cmr_topic_t t = cmr_msg_topic(type);
        topic = t == CMR_TOPIC_COMMANDS ? NULL : cmr_topic_name(t);
        if (!topic) {
            ERRF("%s needs an explicit topic (the agent's command topic)", cmr_msg_type_name(type));
            p->invalid++;
            return CMR_SEND_ERROR;
        }
    }
    cmr_buf_t buf = {0};
    cmr_wire_err_t werr = cmr_msg_encode(type, msg, &buf, errbuf, errlen);
    if (werr != CMR_WIRE_OK) {
        p->invalid++;
        cmr_buf_free(&buf);
        return CMR_SEND_ERROR;
    }
    char key[CMR_KEY_MAX];
    size_t key_len = cmr_msg_key(type, msg, key, sizeof key);
    int rc = send_raw_to(p, topic, partition, key, key_len, buf.data, buf.len, opaque);
    if (rc == CMR_SEND_QUEUE_FULL)
        ERRF("local producer queue is full");
    else if (rc == CMR_SEND_ERROR)
        ERRF("produce to %s failed", topic);
    cmr_buf_free(&buf);
    return rc;
}

int cmr_producer_send_batch(cmr_producer_t *p, const cmr_event_batch_t *b, void *opaque, char *errbuf, size_t errlen)
{
    cmr_segs_writer_t *w = calloc(1, sizeof *w); /* large: not on the caller's stack */
    cmr_event_msg_t m;
    int rc = CMR_SEND_ERROR;
    if (w && cmr_segs_join(w, b->agent_id, b, 1, &m) == 0)
        rc = cmr_producer_send(p, CMR_MSG_EVENT_BATCH, &m, NULL, opaque, errbuf, errlen);
    else
        ERRF("the batch does not encode");
    if (w)
        cmr_segs_writer_free(w);
    free(w);
    return rc;
}

int cmr_producer_flush(cmr_producer_t *p, int timeout_ms)
{
    return rd_kafka_flush(p->rk, timeout_ms) == RD_KAFKA_RESP_ERR_NO_ERROR ? 0 : -1;
}

int cmr_producer_outstanding(cmr_producer_t *p)
{
    return rd_kafka_outq_len(p->rk);
}

void cmr_producer_stats(cmr_producer_t *p, cmr_producer_stats_t *out)
{
    out->queued = p->queued;
    out->delivered = p->delivered;
    out->failed = p->failed;
    out->queue_full = p->queue_full;
    out->invalid = p->invalid;
}

bool cmr_producer_cluster_down(cmr_producer_t *p)
{
    int64_t down = p->all_down_ms;
    return down > 0 && down >= p->up_ms;
}

int cmr_producer_fetch_metadata(cmr_producer_t *p, const char *topic, int timeout_ms)
{
    rd_kafka_topic_t *rkt = topic ? rd_kafka_topic_new(p->rk, topic, NULL) : NULL;
    if (topic && !rkt)
        return -1;
    const struct rd_kafka_metadata *md = NULL;
    int brokers = -1;
    if (rd_kafka_metadata(p->rk, 0, rkt, &md, timeout_ms) == RD_KAFKA_RESP_ERR_NO_ERROR && md) {
        brokers = md->broker_cnt;
        p->up_ms = cmr_mono_ms(); /* the cluster answered */
    }
    if (md)
        rd_kafka_metadata_destroy(md);
    if (rkt)
        rd_kafka_topic_destroy(rkt);
    return brokers;
}

int cmr_producer_topic_known(cmr_producer_t *p, const char *topic, int timeout_ms)
{
    return cmr_kafka_topic_partitions(p->rk, topic, timeout_ms, NULL, NULL, 0);
}

int cmr_producer_topics_known(cmr_producer_t *p, const char *const *topics, size_t n, int timeout_ms, bool *known)
{
    rd_kafka_topic_t **rkts = calloc(n ? n : 1, sizeof *rkts);
    if (!rkts)
        return -1;
    for (size_t i = 0; i < n; i++) { /* handles: the reply updates their metadata too */
        known[i] = false;
        rkts[i] = rd_kafka_topic_new(p->rk, topics[i], NULL);
    }
    const struct rd_kafka_metadata *md = NULL;
    int found = -1;
    if (rd_kafka_metadata(p->rk, 1, NULL, &md, timeout_ms) == RD_KAFKA_RESP_ERR_NO_ERROR && md) {
        cmr_map_t present = {0}; /* out of memory: fewer found, asked for one by one */
        for (int i = 0; i < md->topic_cnt; i++)
            if (md->topics[i].err == RD_KAFKA_RESP_ERR_NO_ERROR && md->topics[i].partition_cnt > 0)
                cmr_map_put(&present, md->topics[i].topic, strlen(md->topics[i].topic), NULL);
        found = 0;
        for (size_t i = 0; i < n; i++)
            found += known[i] = cmr_map_has(&present, topics[i], strlen(topics[i]));
        cmr_map_free(&present);
    }
    if (md)
        rd_kafka_metadata_destroy(md);
    for (size_t i = 0; i < n; i++)
        if (rkts[i])
            rd_kafka_topic_destroy(rkts[i]);
    free(rkts);
    return found;
}

void cmr_producer_destroy(cmr_producer_t *p, int flush_timeout_ms)
{
    if (!p)
        return;
    p->stop = true;
    pthread_join(p->poller, NULL); /* from here on, flush serves the delivery reports */
    if (rd_kafka_flush(p->rk, flush_timeout_ms) != RD_KAFKA_RESP_ERR_NO_ERROR)
        cmr_log(CMR_LOG_WARN, "kafka.flush_incomplete", "client=%s undelivered=%d timeout_ms=%d", rd_kafka_name(p->rk),
                rd_kafka_outq_len(p->rk), flush_timeout_ms);
    if (p->failed > p->failed_logged)
        cmr_log(CMR_LOG_WARN, "kafka.delivery_failed", "client=%s failed_since_last_report=%llu failed_total=%llu",
                rd_kafka_name(p->rk), (unsigned long long)(p->failed - p->failed_logged),
                (unsigned long long)p->failed);
    if (cmr_kafka_destroy_within(p->rk, 0, CMR_KAFKA_DESTROY_WAIT_MS, NULL))
        free(p); /* otherwise kept for the delivery callbacks of the abandoned handle */
}

/* --- transactions ------------------------------------------------------------------ */

int cmr_producer_txn_begin(cmr_producer_t *p, int timeout_ms, char *errbuf, size_t errlen)
{
    rd_kafka_error_t *e = NULL;
    if (!p->txn_ready) {
        e = rd_kafka_init_transactions(p->rk, timeout_ms);
        if (e) {
            ERRF("cannot start transactions (transactional.id %s): %s", p->txn_id, rd_kafka_error_string(e));
            rd_kafka_error_destroy(e);
            return -1;
        }
        p->txn_ready = true;
    }
    e = rd_kafka_begin_transaction(p->rk);
    if (e) {
        ERRF("cannot begin a transaction: %s", rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
        return -1;
    }
    return 0;
}

int cmr_producer_txn_commit(cmr_producer_t *p, int timeout_ms, char *errbuf, size_t errlen)
{
    rd_kafka_error_t *e = rd_kafka_commit_transaction(p->rk, timeout_ms);
    if (e && rd_kafka_error_is_retriable(e)) { /* a timeout: the commit may be asked again */
        rd_kafka_error_destroy(e);
        e = rd_kafka_commit_transaction(p->rk, timeout_ms);
    }
    if (!e)
        return CMR_TXN_COMMITTED;
    ERRF("%s", rd_kafka_error_string(e));
    int abortable = rd_kafka_error_txn_requires_abort(e);
    rd_kafka_error_destroy(e);
    if (!abortable)
        return CMR_TXN_UNKNOWN;
    e = rd_kafka_abort_transaction(p->rk, timeout_ms);
    if (!e)
        return CMR_TXN_ABORTED;
    size_t at = errbuf ? strlen(errbuf) : 0;
    if (errbuf && at < errlen)
        snprintf(errbuf + at, errlen - at, "; abort failed too: %s", rd_kafka_error_string(e));
    rd_kafka_error_destroy(e);
    return CMR_TXN_UNKNOWN;
}

int cmr_producer_txn_abort(cmr_producer_t *p, int timeout_ms, char *errbuf, size_t errlen)
{
    rd_kafka_error_t *e = rd_kafka_abort_transaction(p->rk, timeout_ms);
    if (!e)
        return 0;
    ERRF("cannot abort the transaction: %s", rd_kafka_error_string(e));
    rd_kafka_error_destroy(e);
    return -1;
}

enum { PART_NONE, PART_CONSISTENT, PART_MURMUR2, PART_FNV1A }; /* cmr_trace_partitioner_t.kind */

/* Which of librdkafka's partitioners a `partitioner` setting names (NULL: its default). */
static int partitioner_kind(const char *partitioner)
{
    const char *name = partitioner ? partitioner : "consistent_random";
    if (!strcmp(name, "consistent_random") || !strcmp(name, "consistent"))
        return PART_CONSISTENT;
    if (!strcmp(name, "murmur2_random") || !strcmp(name, "murmur2"))
        return PART_MURMUR2;
    if (!strcmp(name, "fnv1a_random") || !strcmp(name, "fnv1a"))
        return PART_FNV1A;
    return PART_NONE;
}

/* The partition of a key under a partitioner of that kind. */
static int32_t kind_partition(int kind, const void *key, size_t keylen, int32_t partition_count)
{
    /* with a key, none of these reads the topic handle (only the keyless random pick does) */
    switch (kind) {
    case PART_CONSISTENT: return rd_kafka_msg_partitioner_consistent(NULL, key, keylen, partition_count, NULL, NULL);
    case PART_MURMUR2: return rd_kafka_msg_partitioner_murmur2(NULL, key, keylen, partition_count, NULL, NULL);
    case PART_FNV1A: return rd_kafka_msg_partitioner_fnv1a(NULL, key, keylen, partition_count, NULL, NULL);
    default: return -1;
    }
}

int32_t cmr_key_partition(const char *partitioner, const void *key, size_t keylen, int32_t partition_count)
{
    if (!keylen || partition_count <= 0)
        return -1;
    return kind_partition(partitioner_kind(partitioner), key, keylen, partition_count);
}

void cmr_trace_partitioner_init(cmr_trace_partitioner_t *tp, const char *partitioner)
{
    *tp = (cmr_trace_partitioner_t){.kind = partitioner_kind(partitioner)};
}

int32_t cmr_trace_partitioner_pick(cmr_trace_partitioner_t *tp, const uint8_t trace_id[16], int32_t partition_count)
{
    if (partition_count <= 0 || tp->kind == 0)
        return -1;
    char key[33];
    if (tp->kind != PART_CONSISTENT) {
        cmr_hex(trace_id, 16, key);
        return kind_partition(tp->kind, key, 32, partition_count);
    }
    /* librdkafka's consistent partitioner: the key's CRC-32 (zlib's, from 0) modulo the
     * count; a CRC goes on from where the first half's ended */
    uint64_t hi = cmr_be64(trace_id);
    if (!tp->hi_known || tp->hi != hi) {
        cmr_hex(trace_id, 8, key);
        tp->hi_crc = (uint32_t)crc32(0, (const Bytef *)key, 16);
        tp->hi = hi;
        tp->hi_known = true;
    }
    cmr_hex(trace_id + 8, 8, key);
    uint32_t crc = (uint32_t)crc32(tp->hi_crc, (const Bytef *)key, 16);
    return (int32_t)(crc % (uint32_t)partition_count);
}
