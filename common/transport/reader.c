/*
 * reader.c - reads every partition of a topic by assign() (no consumer group, nothing
 * committed), from the beginning or from a time (see reader.h). Used by cmr-config and
 * cmr-instrumenter for cmr.config and cmr.registrations, by cmr-ingest for cmr.methods,
 * cmr.registrations and replay.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librdkafka/rdkafka.h>

#include "cmr/ids.h"
#include "cmr/reader.h"
#include "cmr/kafka.h"
#include "cmr/log.h"

struct cmr_reader {
    rd_kafka_t *rk;
    char *topic;
    int partitions;
    unsigned char *eof_seen;
    int eof_count;
    int64_t total;
    int64_t since_ms; /* messages older than this are skipped (0: none) */
    int64_t skipped;
    rd_kafka_message_t *last;
    char key[256]; /* the last record's key */
};

static int topic_partitions(rd_kafka_t *rk, const char *topic, char *err, size_t errlen)
{
    rd_kafka_topic_t *t = rd_kafka_topic_new(rk, topic, NULL);
    int n = -1;
    for (int attempt = 0; attempt < 10 && n <= 0; attempt++) {
        const struct rd_kafka_metadata *md = NULL;
        rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, t, &md, 5000);
        if (e == RD_KAFKA_RESP_ERR_NO_ERROR && md->topic_cnt == 1 && md->topics[0].err == 0)
            n = md->topics[0].partition_cnt;
        else
            snprintf(err, errlen, "topic %s: %s", topic, e ? rd_kafka_err2str(e) : rd_kafka_err2str(md->topics[0].err));
        if (md)
            rd_kafka_metadata_destroy(md);
    }
    rd_kafka_topic_destroy(t);
    return n;
}

cmr_reader_t *cmr_reader_new(const cmr_conf_t *conf, const char *topic, int64_t since_ms, char *err, size_t errlen)
{
    cmr_reader_t *r = calloc(1, sizeof *r);
    rd_kafka_conf_t *kc = r ? cmr_kafka_conf(conf, err, errlen) : NULL;
    if (!kc) {
        free(r);
        return NULL;
    }
    char group[64], hex[17], e2[512];
    uint8_t rnd[8];
    cmr_random_bytes(rnd, sizeof rnd);
    cmr_hex(rnd, sizeof rnd, hex);
    snprintf(group, sizeof group, "cmr-reader-%s", hex);
    if (rd_kafka_conf_set(kc, "group.id", group, e2, sizeof e2) != RD_KAFKA_CONF_OK ||
        rd_kafka_conf_set(kc, "enable.auto.commit", "false", e2, sizeof e2) != RD_KAFKA_CONF_OK ||
        rd_kafka_conf_set(kc, "enable.partition.eof", "true", e2, sizeof e2) != RD_KAFKA_CONF_OK ||
        rd_kafka_conf_set(kc, "fetch.message.max.bytes", "16777216", e2, sizeof e2) != RD_KAFKA_CONF_OK) {
        snprintf(err, errlen, "%s", e2);
        rd_kafka_conf_destroy(kc);
        free(r);
        return NULL;
    }
    r->rk = rd_kafka_new(RD_KAFKA_CONSUMER, kc, e2, sizeof e2);
    if (!r->rk) {
        snprintf(err, errlen, "%s", e2);
        rd_kafka_conf_destroy(kc);
        free(r);
        return NULL;
    }
    rd_kafka_poll_set_consumer(r->rk);
    r->topic = strdup(topic);
    r->partitions = topic_partitions(r->rk, topic, err, errlen);
    if (r->partitions <= 0 || !r->topic || !(r->eof_seen = calloc((size_t)r->partitions, 1))) {
        cmr_reader_free(r);
        return NULL;
    }
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(r->partitions);
    for (int p = 0; p < r->partitions; p++)
        rd_kafka_topic_partition_list_add(parts, topic, p)->offset =
            since_ms > 0 ? since_ms : RD_KAFKA_OFFSET_BEGINNING;
    if (since_ms > 0) {
        /* a seek hint only: where the cluster cannot answer (the embedded broker always
         * says "end"), the partition is read from the beginning and poll() skips what is
         * older than since_ms */
        r->since_ms = since_ms;
        if (rd_kafka_offsets_for_times(r->rk, parts, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR)
            for (int p = 0; p < r->partitions; p++)
                parts->elems[p].offset = RD_KAFKA_OFFSET_BEGINNING;
        for (int p = 0; p < r->partitions; p++)
            if (parts->elems[p].offset < 0 || parts->elems[p].err)
                parts->elems[p].offset = RD_KAFKA_OFFSET_BEGINNING;
    }
    for (int p = 0; p < r->partitions; p++) {
        int64_t lo = 0, hi = 0;
        if (rd_kafka_query_watermark_offsets(r->rk, topic, p, &lo, &hi, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
            int64_t from = parts->elems[p].offset >= 0 ? parts->elems[p].offset
                                                       : (parts->elems[p].offset == RD_KAFKA_OFFSET_END ? hi : lo);
            r->total += hi > from ? hi - from : 0;
        }
    }
    rd_kafka_resp_err_t e = rd_kafka_assign(r->rk, parts);
    rd_kafka_topic_partition_list_destroy(parts);
    if (e) {
        snprintf(err, errlen, "assign %s: %s", topic, rd_kafka_err2str(e));
        cmr_reader_free(r);
        return NULL;
    }
    return r;
}

void cmr_reader_free(cmr_reader_t *r)
{
    if (!r)
        return;
    if (r->last)
        rd_kafka_message_destroy(r->last);
    if (r->rk) {
        rd_kafka_consumer_close(r->rk);
        rd_kafka_destroy(r->rk);
    }
    free(r->eof_seen);
    free(r->topic);
    free(r);
}

int cmr_reader_poll(cmr_reader_t *r, int timeout_ms, cmr_reader_rec_t *out)
{
    if (r->last) {
        rd_kafka_message_destroy(r->last);
        r->last = NULL;
    }
    rd_kafka_message_t *m = rd_kafka_consumer_poll(r->rk, timeout_ms);
    if (!m)
        return 0;
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        if (m->partition >= 0 && m->partition < r->partitions && !r->eof_seen[m->partition]) {
            r->eof_seen[m->partition] = 1;
            r->eof_count++;
        }
        rd_kafka_message_destroy(m);
        return 0;
    }
    if (m->err) {
        int fatal = m->err == RD_KAFKA_RESP_ERR__FATAL;
        cmr_log(fatal ? CMR_LOG_ERROR : CMR_LOG_WARN, "reader.error", "topic=%s error=\"%s\"", r->topic,
                rd_kafka_message_errstr(m));
        rd_kafka_message_destroy(m);
        return fatal ? -1 : 0;
    }
    if (r->since_ms && rd_kafka_message_timestamp(m, NULL) < r->since_ms) {
        r->skipped++;
        rd_kafka_message_destroy(m);
        return 0;
    }
    r->last = m;
    size_t klen = m->key_len < sizeof r->key - 1 ? m->key_len : sizeof r->key - 1;
    if (m->key)
        memcpy(r->key, m->key, klen);
    r->key[m->key ? klen : 0] = '\0';
    out->key = r->key;
    out->payload = m->payload;
    out->len = m->len;
    out->partition = m->partition;
    out->offset = m->offset;
    out->timestamp_ms = rd_kafka_message_timestamp(m, NULL);
    return 1;
}

bool cmr_reader_caught_up(const cmr_reader_t *r)
{
    return r->eof_count >= r->partitions;
}

int cmr_reader_partitions(const cmr_reader_t *r)
{
    return r->partitions;
}

int64_t cmr_reader_total(const cmr_reader_t *r)
{
    return r->total;
}

int64_t cmr_reader_skipped(const cmr_reader_t *r)
{
    return r->skipped;
}
