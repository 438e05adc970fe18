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
 *
 * Readers live on a client (a librdkafka consumer handle): a reader of its own, or one
 * shared by the long-lived readers of a worker's loop (cmr_reader_client_new). A shared
 * client adds each reader's partitions to its assignment (incremental assign) and sends
 * them to that reader's own queue (partition queues forwarded), so readers on one client
 * never see each other's records. Why share: every librdkafka handle has a main thread
 * that, in the Debian's librdkafka 2.0, spins for up to a millisecond before each of its
 * timers (librdkafka issue 4684, fixed in 2.4): about 0.7 ms of CPU a second per handle
 * while idle, which a worker with seven handles paid seven times.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/clock.h"
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

#define CLIENT_READERS 16         /* readers one client holds at once */
#define READER_CLOSE_WAIT_MS 2000 /* a reader's client closes within this (no group to leave) */

struct cmr_reader_client {
    rd_kafka_t *rk;
    int readers;                        /* open readers on it (0 when the client is freed) */
    cmr_reader_t *open[CLIENT_READERS]; /* them (not owned) */
};

struct cmr_reader {
    cmr_reader_client_t *client;
    bool own_client;                          /* created with the reader, freed with it */
    rd_kafka_t *rk;                           /* client->rk */
    rd_kafka_queue_t *queue;                  /* this reader's records: its partitions are forwarded here */
    rd_kafka_queue_t **pq;                    /* per partition: its fetch queue, while forwarded (NULL: not assigned) */
    bool assigned;                            /* its partitions are in the client's assignment */
    rd_kafka_topic_partition_list_t *pending; /* owned: what to assign at the first poll */
    char *topic;
    reader_part_t *parts; /* indexed by partition; nparts entries (and as many pq) */
    int nparts;
    int wanted, reached; /* partitions read, and how many of them reached their end */
    int64_t total;
    int64_t since_ms; /* messages older than this are skipped (0: none) */
    int64_t skipped;
    rd_kafka_message_t *last;
    char key[256]; /* the last record's key */
};

/* The client's handle: a consumer in a group of its own that never commits, only
 * assigns, and reports the end of each partition. */
cmr_reader_client_t *cmr_reader_client_new(const cmr_conf_t *conf, char *err, size_t errlen)
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
    cmr_reader_client_t *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->rk = cmr_kafka_client(RD_KAFKA_CONSUMER, conf, forced, NULL, NULL, NULL, "reader", err, errlen);
    if (!c->rk) {
        free(c);
        return NULL;
    }
    return c;
}

void cmr_reader_client_free(cmr_reader_client_t *c)
{
    if (!c)
        return;
    assert(c->readers == 0);
    /* a reader only assigns partitions, but a handle with a group.id may still wait for
     * the coordinator in its close */
    if (cmr_kafka_close_within(c->rk, cmr_mono_ms() + READER_CLOSE_WAIT_MS, NULL, NULL))
        free(c);
}

/* Room for nparts partitions (none handed out yet). 0 or -1 (out of memory). */
static int reader_size(cmr_reader_t *r, int nparts)
{
    if (nparts <= 0)
        return 0;
    r->parts = calloc((size_t)nparts, sizeof *r->parts);
    r->pq = calloc((size_t)nparts, sizeof *r->pq);
    if (!r->parts || !r->pq)
        return -1;
    r->nparts = nparts;
    return 0;
}

/* A reader on client (a new client of its own when client is NULL) with room for nparts
 * partitions (0: sized later, once the topic's partitions are known). */
static cmr_reader_t *reader_open(cmr_reader_client_t *client, const cmr_conf_t *conf, const char *topic, int nparts,
                                 char *err, size_t errlen)
{
    cmr_reader_t *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (!client) {
        if (!(client = cmr_reader_client_new(conf, err, errlen))) {
            free(r);
            return NULL;
        }
        r->own_client = true;
    }
    if (client->readers == CLIENT_READERS) {
        snprintf(err, errlen, "a reader client holds at most %d readers", CLIENT_READERS);
        if (r->own_client)
            cmr_reader_client_free(client);
        free(r);
        return NULL;
    }
    r->client = client;
    client->open[client->readers++] = r;
    r->rk = client->rk;
    r->queue = rd_kafka_queue_new(r->rk);
    r->topic = strdup(topic);
    if (!r->queue || !r->topic || reader_size(r, nparts) != 0) {
        snprintf(err, errlen, "out of memory");
        cmr_reader_free(r);
        return NULL;
    }
    return r;
}

/* Adds list's partitions to the client's assignment, each sent to this reader's queue
 * first (so that no record of it reaches the client's consumer queue). Takes list. */
static int reader_assign(cmr_reader_t *r, rd_kafka_topic_partition_list_t *list, char *err, size_t errlen)
{
    for (int i = 0; i < list->cnt; i++) {
        int32_t p = list->elems[i].partition;
        rd_kafka_queue_t *pq = rd_kafka_queue_get_partition(r->rk, r->topic, p);
        if (!pq) {
            snprintf(err, errlen, "assign %s [%d]: no partition queue", r->topic, (int)p);
            rd_kafka_topic_partition_list_destroy(list);
            return -1;
        }
        rd_kafka_queue_forward(pq, r->queue);
        r->pq[p] = pq;
    }
    rd_kafka_error_t *e = rd_kafka_incremental_assign(r->rk, list);
    rd_kafka_topic_partition_list_destroy(list);
    if (e) {
        snprintf(err, errlen, "assign %s: %s", r->topic, rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
        return -1;
    }
    r->assigned = true;
    return 0;
}

/* A reader of every partition of topic, on client or (NULL) a client of its own. */
static cmr_reader_t *reader_whole(cmr_reader_client_t *client, const cmr_conf_t *conf, const char *topic,
                                  int64_t since_ms, char *err, size_t errlen)
{
    cmr_reader_t *r = reader_open(client, conf, topic, 0, err, errlen);
    if (!r)
        return NULL;
    int n = -1;
    for (int attempt = 0; attempt < 10 && n <= 0; attempt++)
        if (cmr_kafka_topic_partitions(r->rk, topic, 5000, &n, err, errlen) != 1)
            n = -1;
    rd_kafka_topic_partition_list_t *parts =
        n > 0 && reader_size(r, n) == 0 ? rd_kafka_topic_partition_list_new(n) : NULL;
    if (!parts) {
        if (n > 0)
            snprintf(err, errlen, "out of memory");
        cmr_reader_free(r);
        return NULL;
    }
    r->wanted = n;
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
    r->pending = parts;
    return r;
}

cmr_reader_t *cmr_reader_new(const cmr_conf_t *conf, const char *topic, int64_t since_ms, char *err, size_t errlen)
{
    return reader_whole(NULL, conf, topic, since_ms, err, errlen);
}

cmr_reader_t *cmr_reader_open(cmr_reader_client_t *client, const char *topic, int64_t since_ms, char *err,
                              size_t errlen)
{
    return reader_whole(client, NULL, topic, since_ms, err, errlen);
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
    cmr_reader_t *r = reader_open(NULL, conf, topic, nparts, err, errlen);
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
    r->pending = parts;
    return r;
}

/* Takes the reader's partitions out of the client's assignment and stops forwarding
 * them (what they had fetched is dropped with the reader's queue). */
static void reader_unassign(cmr_reader_t *r)
{
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(r->nparts > 0 ? r->nparts : 1);
    for (int p = 0; p < r->nparts; p++)
        if (r->pq[p] && list)
            rd_kafka_topic_partition_list_add(list, r->topic, p);
    if (r->assigned && list && list->cnt > 0) {
        rd_kafka_error_t *e = rd_kafka_incremental_unassign(r->rk, list);
        if (e) {
            cmr_log(CMR_LOG_WARN, "reader.unassign_failed", "topic=%s error=\"%s\"", r->topic,
                    rd_kafka_error_string(e));
            rd_kafka_error_destroy(e);
        }
    }
    if (list)
        rd_kafka_topic_partition_list_destroy(list);
    for (int p = 0; p < r->nparts; p++)
        if (r->pq[p]) {
            rd_kafka_queue_forward(r->pq[p], NULL);
            rd_kafka_queue_destroy(r->pq[p]);
            r->pq[p] = NULL;
        }
    r->assigned = false;
}

void cmr_reader_free(cmr_reader_t *r)
{
    if (!r)
        return;
    if (r->last)
        rd_kafka_message_destroy(r->last);
    if (r->pending)
        rd_kafka_topic_partition_list_destroy(r->pending);
    if (r->client) {
        if (r->pq)
            reader_unassign(r); /* a shared client goes on with its other readers */
        if (r->queue)
            rd_kafka_queue_destroy(r->queue);
        cmr_reader_client_t *c = r->client;
        for (int i = 0; i < c->readers; i++)
            if (c->open[i] == r) {
                c->open[i] = c->open[--c->readers];
                break;
            }
        if (r->own_client)
            cmr_reader_client_free(r->client);
    }
    free(r->pq);
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
        if (!r->pq || !r->pq[partition])
            return; /* not assigned yet: the first poll leaves it out */
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

/* At the first poll of any reader of its client: assigns the partitions (those still
 * wanted: a range dropped before is left out). Deferred to there, and done for all the
 * client's readers at once, so that readers opened one after the other on a shared client
 * ask their metadata and offsets while the client fetches nothing yet, and start in the
 * same fetch: a broker answers a connection's requests in order, so each would otherwise
 * wait behind the client's long-polling fetch (fetch.wait.max.ms) for its offsets and
 * again for its first records. -1 on failure. */
static int reader_start(cmr_reader_t *r)
{
    rd_kafka_topic_partition_list_t *all = r->pending, *list = rd_kafka_topic_partition_list_new(all->cnt);
    r->pending = NULL;
    for (int i = 0; list && i < all->cnt; i++)
        if (!r->parts[all->elems[i].partition].stopped)
            rd_kafka_topic_partition_list_add(list, r->topic, all->elems[i].partition)->offset = all->elems[i].offset;
    rd_kafka_topic_partition_list_destroy(all);
    char err[512];
    if (!list) {
        cmr_log(CMR_LOG_ERROR, "reader.assign_failed", "topic=%s error=\"out of memory\"", r->topic);
        return -1;
    }
    if (list->cnt == 0) { /* every range empty or dropped */
        rd_kafka_topic_partition_list_destroy(list);
        return 0;
    }
    if (reader_assign(r, list, err, sizeof err) != 0) {
        cmr_log(CMR_LOG_ERROR, "reader.assign_failed", "topic=%s error=\"%s\"", r->topic, err);
        return -1;
    }
    return 0;
}

/* Serves what reaches the client's own queue (none of the readers' records: errors and
 * callbacks), logging errors. -1 on a fatal one. */
static int client_events(cmr_reader_t *r)
{
    rd_kafka_message_t *m;
    int rc = 0;
    for (int i = 0; i < 64 && (m = rd_kafka_consumer_poll(r->rk, 0)); i++) {
        if (m->err) {
            int fatal = m->err == RD_KAFKA_RESP_ERR__FATAL;
            cmr_log(fatal ? CMR_LOG_ERROR : CMR_LOG_WARN, "reader.error", "topic=%s error=\"%s\"", r->topic,
                    rd_kafka_message_errstr(m));
            rc = fatal ? -1 : rc;
        }
        rd_kafka_message_destroy(m); /* a record cannot come here: every partition is forwarded first */
    }
    return rc;
}

int cmr_reader_poll(cmr_reader_t *r, int timeout_ms, cmr_reader_rec_t *out)
{
    if (r->last) {
        rd_kafka_message_destroy(r->last);
        r->last = NULL;
    }
    if (r->pending) /* the client's readers start together: see reader_start */
        for (int i = 0; i < r->client->readers; i++)
            if (r->client->open[i]->pending && reader_start(r->client->open[i]) != 0)
                return -1;
    if (client_events(r) != 0)
        return -1;
    rd_kafka_message_t *m = rd_kafka_consume_queue(r->queue, timeout_ms);
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
