/*
 * reader.c - reads partitions of a topic by assign() (no consumer group, nothing
 * committed): every partition from the beginning or from a time, or given offset ranges
 * (see reader.h). Used by cmr-config and cmr-instrumenter for cmr.config and
 * cmr.registrations, by cmr-ingest for cmr.methods, cmr.registrations and replay, and by
 * the instrumenter's catch-up of newly assigned cmr.classes partitions (ranges).
 *
 * Per partition the reader keeps how far to read (`until`) and whether the partition has
 * reached its end once (what "caught up" counts). A range that is done, or dropped, is
 * paused: librdkafka stops fetching it and drops what it had fetched.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/ids.h"
#include "cmr/log.h"
#include "cmr/reader.h"
#include "kafka_internal.h"

typedef struct reader_part {
    int64_t until; /* hand out offsets below this (INT64_MAX: follow the topic) */
    bool wanted;   /* read at all */
    bool reached;  /* its end (or `until`) reached once, or dropped: counts for caught-up */
    bool stopped;  /* range done or dropped: nothing more handed out, fetching paused */
} reader_part_t;

struct cmr_reader {
    rd_kafka_t *rk;
    char *topic;
    reader_part_t *parts; /* indexed by partition; nparts entries */
    int nparts;
    int wanted, reached; /* partitions read, and how many of them reached their end */
    int64_t total;
    int64_t since_ms; /* messages older than this are skipped (0: none) */
    int64_t skipped;
    rd_kafka_message_t *last;
    char key[256]; /* the last record's key */
};

/* The reader's handle: a consumer in a group of its own that never commits and reports
 * the end of each partition. */
static cmr_reader_t *reader_open(const cmr_conf_t *conf, const char *topic, int nparts, char *err, size_t errlen)
{
    char group[64], hex[17];
    uint8_t rnd[8];
    cmr_random_bytes(rnd, sizeof rnd);
    cmr_hex(rnd, sizeof rnd, hex);
    snprintf(group, sizeof group, "cmr-reader-%s", hex);
    const cmr_kafka_prop_t forced[] = {{"group.id", group},
                                       {"enable.auto.commit", "false"},
                                       {"enable.partition.eof", "true"},
                                       /* a start the topic no longer holds (retention):
                                        * from the oldest it has, not from its end */
                                       {"auto.offset.reset", "earliest"},
                                       {"fetch.message.max.bytes", "16777216"},
                                       {NULL, NULL}};
    cmr_reader_t *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    r->rk = cmr_kafka_client(RD_KAFKA_CONSUMER, conf, forced, NULL, NULL, NULL, "reader", err, errlen);
    if (!r->rk) {
        cmr_reader_free(r);
        return NULL;
    }
    r->topic = strdup(topic);
    r->nparts = nparts;
    r->parts = nparts > 0 ? calloc((size_t)nparts, sizeof *r->parts) : NULL;
    if (!r->topic || (nparts > 0 && !r->parts)) {
        snprintf(err, errlen, "out of memory");
        cmr_reader_free(r);
        return NULL;
    }
    return r;
}

static int reader_assign(cmr_reader_t *r, rd_kafka_topic_partition_list_t *list, char *err, size_t errlen)
{
    rd_kafka_resp_err_t e = rd_kafka_assign(r->rk, list);
    rd_kafka_topic_partition_list_destroy(list);
    if (e)
        snprintf(err, errlen, "assign %s: %s", r->topic, rd_kafka_err2str(e));
    return e ? -1 : 0;
}

cmr_reader_t *cmr_reader_new(const cmr_conf_t *conf, const char *topic, int64_t since_ms, char *err, size_t errlen)
{
    cmr_reader_t *r = reader_open(conf, topic, 0, err, errlen);
    if (!r)
        return NULL;
    int n = -1;
    for (int attempt = 0; attempt < 10 && n <= 0; attempt++)
        if (cmr_kafka_topic_partitions(r->rk, topic, 5000, &n, err, errlen) != 1)
            n = -1;
    r->parts = n > 0 ? calloc((size_t)n, sizeof *r->parts) : NULL;
    rd_kafka_topic_partition_list_t *parts = r->parts ? rd_kafka_topic_partition_list_new(n) : NULL;
    if (!parts) {
        if (n > 0)
            snprintf(err, errlen, "out of memory");
        cmr_reader_free(r);
        return NULL;
    }
    r->nparts = r->wanted = n;
    for (int p = 0; p < n; p++) {
        r->parts[p] = (reader_part_t){.until = INT64_MAX, .wanted = true};
        rd_kafka_topic_partition_list_add(parts, topic, p)->offset =
            since_ms > 0 ? since_ms : RD_KAFKA_OFFSET_BEGINNING;
    }
    if (since_ms > 0) {
        /* a seek hint only: where the cluster cannot answer (the embedded broker always
         * says "end"), the partition is read from the beginning and poll() skips what is
         * older than since_ms */
        r->since_ms = since_ms;
        if (rd_kafka_offsets_for_times(r->rk, parts, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR)
            for (int p = 0; p < n; p++)
                parts->elems[p].offset = RD_KAFKA_OFFSET_BEGINNING;
        for (int p = 0; p < n; p++)
            if (parts->elems[p].offset < 0 || parts->elems[p].err)
                parts->elems[p].offset = RD_KAFKA_OFFSET_BEGINNING;
    }
    for (int p = 0; p < n; p++) {
        int64_t lo = 0, hi = 0;
        if (rd_kafka_query_watermark_offsets(r->rk, topic, p, &lo, &hi, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
            int64_t from = parts->elems[p].offset >= 0 ? parts->elems[p].offset
                                                       : (parts->elems[p].offset == RD_KAFKA_OFFSET_END ? hi : lo);
            r->total += hi > from ? hi - from : 0;
        }
    }
    if (reader_assign(r, parts, err, errlen) != 0) {
        cmr_reader_free(r);
        return NULL;
    }
    return r;
}

cmr_reader_t *cmr_reader_new_ranges(const cmr_conf_t *conf, const char *topic, const cmr_reader_range_t *ranges,
                                    size_t count, char *err, size_t errlen)
{
    int nparts = 0;
    for (size_t i = 0; i < count; i++) {
        if (ranges[i].partition < 0) {
            snprintf(err, errlen, "partition %d of %s: not a partition", (int)ranges[i].partition, topic);
            return NULL;
        }
        if (ranges[i].partition >= nparts)
            nparts = ranges[i].partition + 1;
    }
    cmr_reader_t *r = reader_open(conf, topic, nparts, err, errlen);
    rd_kafka_topic_partition_list_t *parts = r ? rd_kafka_topic_partition_list_new((int)count) : NULL;
    if (!parts) {
        cmr_reader_free(r);
        return NULL;
    }
    for (size_t i = 0; i < count; i++) {
        reader_part_t *p = &r->parts[ranges[i].partition];
        if (p->wanted) {
            snprintf(err, errlen, "partition %d of %s: two ranges", (int)ranges[i].partition, topic);
            rd_kafka_topic_partition_list_destroy(parts);
            cmr_reader_free(r);
            return NULL;
        }
        *p = (reader_part_t){.until = ranges[i].until, .wanted = true};
        r->wanted++;
        if (ranges[i].from >= ranges[i].until) { /* empty: done already */
            p->reached = p->stopped = true;
            r->reached++;
            continue;
        }
        r->total += ranges[i].until - ranges[i].from;
        rd_kafka_topic_partition_list_add(parts, topic, ranges[i].partition)->offset = ranges[i].from;
    }
    if (reader_assign(r, parts, err, errlen) != 0) {
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
    free(r->parts);
    free(r->topic);
    free(r);
}

/* The partition has reached its end (or its range's); stop = read no further. */
static void part_reached(cmr_reader_t *r, int32_t partition, bool stop)
{
    reader_part_t *p = &r->parts[partition];
    if (!p->reached) {
        p->reached = true;
        r->reached++;
        assert(r->reached <= r->wanted);
    }
    if (stop && !p->stopped) {
        p->stopped = true;
        rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
        if (list) {
            rd_kafka_topic_partition_list_add(list, r->topic, partition);
            rd_kafka_pause_partitions(r->rk, list); /* a failure only costs fetched data */
            rd_kafka_topic_partition_list_destroy(list);
        }
    }
}

void cmr_reader_drop(cmr_reader_t *r, int32_t partition)
{
    if (partition >= 0 && partition < r->nparts && r->parts[partition].wanted)
        part_reached(r, partition, true);
}

bool cmr_reader_partition_done(const cmr_reader_t *r, int32_t partition)
{
    return partition < 0 || partition >= r->nparts || !r->parts[partition].wanted || r->parts[partition].reached;
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
    /* a partition that is not ours cannot come from assign(): skipped all the same */
    bool ours = m->partition >= 0 && m->partition < r->nparts && r->parts[m->partition].wanted;
    reader_part_t *p = ours ? &r->parts[m->partition] : NULL;
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        if (p) /* a range that ends before `until`: nothing more to read */
            part_reached(r, m->partition, p->until != INT64_MAX);
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
    if (!p || p->stopped || m->offset >= p->until) { /* fetched before the pause took effect */
        if (p && !p->stopped)
            part_reached(r, m->partition, true);
        rd_kafka_message_destroy(m);
        return 0;
    }
    if (r->since_ms && rd_kafka_message_timestamp(m, NULL) < r->since_ms) {
        r->skipped++;
        rd_kafka_message_destroy(m);
        return 0;
    }
    if (m->offset + 1 >= p->until) /* the range's last record */
        part_reached(r, m->partition, true);
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
    return r->reached >= r->wanted;
}

int cmr_reader_partitions(const cmr_reader_t *r)
{
    return r->wanted;
}

int64_t cmr_reader_total(const cmr_reader_t *r)
{
    return r->total;
}

int64_t cmr_reader_skipped(const cmr_reader_t *r)
{
    return r->skipped;
}
