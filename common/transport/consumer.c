/*
 * consumer.c - the consumer side of the transport (see kafka.h).
 *
 * A consumer-group member that hands out decoded records, skips (and counts) messages
 * that do not decode, and stores an offset only when the caller marks a record done.
 * librdkafka's auto-commit then commits what was stored; close commits the rest.
 *
 * Pausing from the rebalance callback: the caller's callback runs before the assignment
 * is made, so pauses it asks for are collected and applied right after the assign, in
 * the same callback (before any fetch of the new partitions can start).
 *
 * A pause holds whatever librdkafka does. Its pause is an asynchronous op of the
 * partition that a newer op of the same partition makes outdated before it is served:
 * the fetch start that follows an assignment once the committed offsets are known can
 * overtake the pause asked for right after the assign, and the partition is then fetched
 * as if never paused (librdkafka issue 2190; seen once in many runs on a loaded machine).
 * So the consumer keeps its own list of paused partitions and checks every record
 * against it: a record of a paused partition is not handed out (and not stored), the
 * pause is asked for again, and the resume first seeks the partition back to the first
 * record held back, so each record is still handed out once, in order.
 */
#include <assert.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/buf.h"
#include "cmr/clock.h"
#include "cmr/kafka.h"
#include "cmr/log.h"
#include "cmr/rejects.h"
#include "cmr/wire.h"
#include "kafka_internal.h"

/* A partition the caller paused and has not resumed. */
typedef struct paused_part {
    char *topic; /* owned */
    int32_t partition;
    int64_t rewind;      /* the first record held back while paused (CMR_OFFSET_INVALID: none) */
    int64_t repaused_ms; /* when the pause was last asked for again */
} paused_part_t;

/* How often a paused partition whose records still arrive is paused again. */
#define REPAUSE_EVERY_MS 100
/* How long a resume waits for the seek back to the first record held back. */
#define REWIND_TIMEOUT_MS 10000

struct cmr_consumer {
    rd_kafka_t *rk;
    cmr_rebalance_cb_t *rebalance_cb;
    void *cb_opaque;
    uint64_t received, rejected, done, rebalances, held_back;
    bool assigned;                                    /* cmr_consumer_new_assigned: no group, no commits */
    bool in_rebalance;                                /* the caller's rebalance callback runs */
    int64_t close_deadline_ms;                        /* closing: its commits wait until then */
    rd_kafka_topic_partition_list_t *deferred_pauses; /* asked for during it (owned) */
    paused_part_t *paused;                            /* owned, npaused of cap_paused */
    size_t npaused, cap_paused;
};

/* A record as allocated: what the caller sees first, then what only the consumer uses. */
typedef struct record_impl {
    cmr_record_t pub;
    rd_kafka_message_t *raw; /* owned: payload, topic name and offset store */
    char key[];              /* NUL-terminated copy of the key */
} record_impl_t;

#define ERRF(...) CMR_ERRF(errbuf, errlen, __VA_ARGS__)

/* The caller's view of a librdkafka list (topic names point into it). NULL on out of
 * memory (the callback is then given nothing). */
static cmr_partition_t *parts_of(const rd_kafka_topic_partition_list_t *list)
{
    cmr_partition_t *parts = calloc(list->cnt ? (size_t)list->cnt : 1, sizeof *parts);
    for (int i = 0; parts && i < list->cnt; i++)
        parts[i] = (cmr_partition_t){list->elems[i].topic, list->elems[i].partition, list->elems[i].offset};
    return parts;
}

/* --- the paused partitions ----------------------------------------------------------- */

static paused_part_t *paused_find(cmr_consumer_t *c, const char *topic, int32_t partition)
{
    for (size_t i = 0; i < c->npaused; i++)
        if (c->paused[i].partition == partition && strcmp(c->paused[i].topic, topic) == 0)
            return &c->paused[i];
    return NULL;
}

static int paused_add(cmr_consumer_t *c, const char *topic, int32_t partition)
{
    if (paused_find(c, topic, partition))
        return 0;
    if (CMR_ARRAY_GROW(c->paused, c->cap_paused, c->npaused + 1) != 0)
        return -1;
    char *name = strdup(topic);
    if (!name)
        return -1;
    c->paused[c->npaused++] = (paused_part_t){name, partition, CMR_OFFSET_INVALID, 0};
    return 0;
}

static void paused_remove(cmr_consumer_t *c, paused_part_t *p)
{
    free(p->topic);
    *p = c->paused[--c->npaused];
}

/* Pauses or resumes partitions in librdkafka now. 0 or -1. */
static int pause_resume(cmr_consumer_t *c, const cmr_partition_t *parts, size_t count, bool pause)
{
    rd_kafka_topic_partition_list_t *list = cmr_kafka_list_of(parts, count);
    if (!list)
        return -1;
    rd_kafka_resp_err_t err = pause ? rd_kafka_pause_partitions(c->rk, list) : rd_kafka_resume_partitions(c->rk, list);
    rd_kafka_topic_partition_list_destroy(list);
    if (err)
        cmr_log(CMR_LOG_ERROR, pause ? "kafka.pause_failed" : "kafka.resume_failed", "error=\"%s\"",
                rd_kafka_err2str(err));
    return err ? -1 : 0;
}

/* 1 when m belongs to a paused partition (librdkafka lost the pause): it is not handed
 * out, the partition will be rewound to it on resume, and the pause is asked for again. */
static int held_back(cmr_consumer_t *c, const rd_kafka_message_t *m)
{
    if (!c->npaused)
        return 0;
    const char *topic = rd_kafka_topic_name(m->rkt);
    paused_part_t *p = paused_find(c, topic, m->partition);
    if (!p)
        return 0;
    c->held_back++;
    if (p->rewind == CMR_OFFSET_INVALID)
        cmr_log(CMR_LOG_INFO, "kafka.paused_record_held", "topic=%s partition=%d offset=%lld", topic, m->partition,
                (long long)m->offset);
    if (p->rewind == CMR_OFFSET_INVALID || m->offset < p->rewind)
        p->rewind = m->offset;
    int64_t now = cmr_mono_ms();
    if (now - p->repaused_ms >= REPAUSE_EVERY_MS) {
        p->repaused_ms = now;
        pause_resume(c, &(cmr_partition_t){p->topic, p->partition, CMR_OFFSET_INVALID}, 1, true);
    }
    return 1;
}

/* Seeks the resumed partitions that had records held back to the first of them, and
 * waits until librdkafka has done it (a seek still queued would make the resume after it
 * outdated). Those that could not be rewound stay paused. 0 or -1. */
static int rewind_held(cmr_consumer_t *c, const cmr_partition_t *parts, size_t count)
{
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new((int)count);
    if (!list)
        return -1;
    for (size_t i = 0; i < count; i++) {
        paused_part_t *p = paused_find(c, parts[i].topic, parts[i].partition);
        if (p && p->rewind != CMR_OFFSET_INVALID)
            rd_kafka_topic_partition_list_add(list, p->topic, p->partition)->offset = p->rewind;
    }
    int rc = 0;
    if (list->cnt) {
        rd_kafka_error_t *error = rd_kafka_seek_partitions(c->rk, list, REWIND_TIMEOUT_MS);
        if (error) {
            cmr_log(CMR_LOG_ERROR, "kafka.rewind_failed", "partitions=%d error=\"%s\"", list->cnt,
                    rd_kafka_error_string(error));
            rd_kafka_error_destroy(error);
            rc = -1;
        }
        for (int i = 0; rc == 0 && i < list->cnt; i++)
            if (list->elems[i].err) {
                cmr_log(CMR_LOG_ERROR, "kafka.rewind_failed", "topic=%s partition=%d offset=%lld error=\"%s\"",
                        list->elems[i].topic, list->elems[i].partition, (long long)list->elems[i].offset,
                        rd_kafka_err2str(list->elems[i].err));
                rc = -1;
            }
        if (rc == 0)
            cmr_log(CMR_LOG_INFO, "kafka.paused_records_rewound", "partitions=%d", list->cnt);
    }
    rd_kafka_topic_partition_list_destroy(list);
    return rc;
}

/* A revoked partition is no longer paused: neither here nor in librdkafka, which would
 * otherwise keep the pause for the next time the partition is assigned. */
static void forget_revoked_pauses(cmr_consumer_t *c, const rd_kafka_topic_partition_list_t *revoked)
{
    rd_kafka_topic_partition_list_t *resume = rd_kafka_topic_partition_list_new(revoked->cnt);
    for (int i = 0; i < revoked->cnt; i++) {
        paused_part_t *p = paused_find(c, revoked->elems[i].topic, revoked->elems[i].partition);
        if (!p)
            continue;
        if (resume)
            rd_kafka_topic_partition_list_add(resume, p->topic, p->partition);
        paused_remove(c, p);
    }
    if (resume && resume->cnt)
        rd_kafka_resume_partitions(c->rk, resume);
    if (resume)
        rd_kafka_topic_partition_list_destroy(resume);
}

/* --- rebalancing ------------------------------------------------------------------------ */

/* Runs the caller's rebalance callback; pauses it asked for are kept for after the assign. */
static void call_rebalance_cb(cmr_consumer_t *c, int revoked, const rd_kafka_topic_partition_list_t *list)
{
    if (!c->rebalance_cb)
        return;
    cmr_partition_t *parts = parts_of(list);
    if (!parts)
        cmr_log(CMR_LOG_ERROR, "kafka.rebalance_oom", "count=%d", list->cnt);
    c->in_rebalance = true;
    c->rebalance_cb(c, revoked, parts, parts ? (size_t)list->cnt : 0, c->cb_opaque);
    c->in_rebalance = false;
    free(parts);
}

static void apply_deferred_pauses(cmr_consumer_t *c, int revoked)
{
    if (!c->deferred_pauses)
        return;
    rd_kafka_resp_err_t err =
        revoked ? RD_KAFKA_RESP_ERR_NO_ERROR : rd_kafka_pause_partitions(c->rk, c->deferred_pauses);
    if (err)
        cmr_log(CMR_LOG_ERROR, "kafka.pause_failed", "error=\"%s\"", rd_kafka_err2str(err));
    rd_kafka_topic_partition_list_destroy(c->deferred_pauses);
    c->deferred_pauses = NULL;
}

/* How long a commit may wait for its answer: a synchronous rd_kafka_commit() waits for
 * the group coordinator without bound, so a worker stopping while the cluster is
 * unreachable would never exit. */
#define COMMIT_WAIT_MS 10000
/* How long closing may wait for the group (after the commit). */
#define CLOSE_WAIT_MS 10000

/* How long a commit of c waits for its answer: COMMIT_WAIT_MS, or while closing what is
 * left of the close's time (one bound for the close and its commits). */
static int commit_wait_ms(const cmr_consumer_t *c)
{
    if (!c->close_deadline_ms)
        return COMMIT_WAIT_MS;
    int64_t left = c->close_deadline_ms - cmr_mono_ms();
    return left <= 0 ? 0 : left < COMMIT_WAIT_MS ? (int)left : COMMIT_WAIT_MS;
}

/* Commits the stored offsets and waits for the answer at most wait_ms (then
 * RD_KAFKA_RESP_ERR__TIMED_OUT): asynchronous, its result on a queue of its own. */
static rd_kafka_resp_err_t commit_stored(rd_kafka_t *rk, int wait_ms)
{
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_resp_err_t err = q ? rd_kafka_commit_queue(rk, NULL, q, NULL, NULL) : RD_KAFKA_RESP_ERR__CRIT_SYS_RESOURCE;
    if (!err) {
        rd_kafka_event_t *ev = rd_kafka_queue_poll(q, wait_ms);
        err = ev ? rd_kafka_event_error(ev) : RD_KAFKA_RESP_ERR__TIMED_OUT;
        if (ev)
            rd_kafka_event_destroy(ev);
    }
    if (q)
        rd_kafka_queue_destroy(q);
    return err;
}

static void consumer_rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *parts,
                                  void *opaque)
{
    cmr_consumer_t *c = opaque;
    int revoked = err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS;
    c->rebalances++;
    cmr_log(CMR_LOG_INFO, revoked ? "kafka.partitions_revoked" : "kafka.partitions_assigned",
            "client=%s count=%d protocol=%s", rd_kafka_name(rk), parts->cnt, rd_kafka_rebalance_protocol(rk));
    call_rebalance_cb(c, revoked, parts);
    if (revoked) /* hand over what was processed before the partitions go elsewhere */
        commit_stored(rk, commit_wait_ms(c));
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
    apply_deferred_pauses(c, revoked);
    if (revoked)
        forget_revoked_pauses(c, parts);
}

static void consumer_callbacks(rd_kafka_conf_t *rk_conf)
{
    rd_kafka_conf_set_rebalance_cb(rk_conf, consumer_rebalance_cb);
}

cmr_consumer_t *cmr_consumer_new(const cmr_conf_t *conf, const char *group_id, const char *const *topics,
                                 size_t ntopics, cmr_rebalance_cb_t *rebalance_cb, void *cb_opaque, char *errbuf,
                                 size_t errlen)
{
    cmr_consumer_t *c = cmr_kafka_client_alloc(sizeof *c, errbuf, errlen);
    if (!c)
        return NULL;
    c->rebalance_cb = rebalance_cb;
    c->cb_opaque = cb_opaque;
    const cmr_kafka_prop_t forced[] = {{"group.id", group_id}, {"enable.auto.offset.store", "false"}, {NULL, NULL}};
    const cmr_kafka_prop_t defaults[] = {{"auto.offset.reset", "earliest"},
                                         {"enable.auto.commit", "true"},
                                         {"auto.commit.interval.ms", "1000"},
                                         {"fetch.message.max.bytes", "16777216"},
                                         {NULL, NULL}};
    c->rk =
        cmr_kafka_client(RD_KAFKA_CONSUMER, conf, forced, defaults, consumer_callbacks, c, "consumer", errbuf, errlen);
    if (!c->rk)
        goto fail;
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

cmr_consumer_t *cmr_consumer_new_assigned(const cmr_conf_t *conf, const char *client_id, const char *topic,
                                          int timeout_ms, char *errbuf, size_t errlen)
{
    cmr_consumer_t *c = cmr_kafka_client_alloc(sizeof *c, errbuf, errlen);
    if (!c)
        return NULL;
    c->assigned = true;
    /* librdkafka's consumer poll needs a group id; it is never joined (no subscribe) and
     * nothing is committed to it */
    /* offset 0, not the logical BEGINNING: a logical offset is first looked up
     * (ListOffsets), and librdkafka retries that lookup only after 500 ms when the
     * partition's leader is not known yet, as it is not right after the assign; an
     * absolute offset is fetched as soon as the leader is known. Where retention removed
     * offset 0, auto.offset.reset=earliest (forced) starts at the oldest record left. */
    const cmr_kafka_prop_t forced[] = {{"group.id", client_id},           {"client.id", client_id},
                                       {"enable.auto.commit", "false"},   {"enable.auto.offset.store", "false"},
                                       {"auto.offset.reset", "earliest"}, {NULL, NULL}};
    const cmr_kafka_prop_t defaults[] = {{"fetch.message.max.bytes", "16777216"}, {NULL, NULL}};
    c->rk = cmr_kafka_client(RD_KAFKA_CONSUMER, conf, forced, defaults, NULL, c, "consumer", errbuf, errlen);
    if (!c->rk)
        goto fail;
    int n = 0;
    if (cmr_kafka_topic_partitions(c->rk, topic, timeout_ms, &n, errbuf, errlen) != 1 || n <= 0) {
        if (n <= 0)
            CMR_ERRF(errbuf, errlen, "topic %s: not known to the cluster", topic);
        goto fail_rk;
    }
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(n);
    if (!list) {
        ERRF("out of memory");
        goto fail_rk;
    }
    for (int p = 0; p < n; p++)
        rd_kafka_topic_partition_list_add(list, topic, p)->offset = 0;
    rd_kafka_resp_err_t rerr = rd_kafka_assign(c->rk, list);
    rd_kafka_topic_partition_list_destroy(list);
    if (rerr) {
        ERRF("cannot assign %s: %s", topic, rd_kafka_err2str(rerr));
        goto fail_rk;
    }
    cmr_log(CMR_LOG_DEBUG, "kafka.partitions_assigned", "client=%s topic=%s count=%d from=beginning", client_id, topic,
            n);
    return c;
fail_rk:
    rd_kafka_destroy(c->rk);
fail:
    free(c);
    return NULL;
}

void cmr_record_free(cmr_record_t *rec)
{
    if (!rec)
        return;
    record_impl_t *r = (record_impl_t *)rec;
    cmr_msg_free(&rec->msg);
    rd_kafka_message_destroy(r->raw);
    free(r);
}

/* Skips a message that did not decode: logged, counted, and its offset stored so that it
 * is not redelivered forever. */
static void consumer_skip(cmr_consumer_t *c, rd_kafka_message_t *m, cmr_wire_err_t err, const char *why)
{
    c->rejected++;
    cmr_reject(rd_kafka_topic_name(m->rkt), cmr_wire_err_name(err), m->partition, m->offset, why);
    rd_kafka_offset_store(m->rkt, m->partition, m->offset);
}

int cmr_consumer_poll(cmr_consumer_t *c, int timeout_ms, cmr_record_t **out)
{
    *out = NULL;
    rd_kafka_message_t *m = rd_kafka_consumer_poll(c->rk, timeout_ms);
    if (!m)
        return 0;
    if (!m->err && held_back(c, m)) {
        rd_kafka_message_destroy(m);
        return 0;
    }
    if (m->err) {
        int fatal = m->err == RD_KAFKA_RESP_ERR__FATAL;
        if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
            cmr_log(fatal ? CMR_LOG_ERROR : CMR_LOG_WARN, "kafka.consume_error", "error=\"%s\"",
                    rd_kafka_message_errstr(m));
        rd_kafka_message_destroy(m);
        return fatal ? -1 : 0;
    }
    record_impl_t *r = calloc(1, sizeof *r + m->key_len + 1);
    char why[256] = "";
    if (!r) {
        rd_kafka_message_destroy(m);
        return 0; /* not stored: redelivered after a restart */
    }
    cmr_record_t *rec = &r->pub;
    cmr_wire_err_t derr = cmr_msg_decode(m->payload, m->len, &rec->msg, why, sizeof why);
    if (derr != CMR_WIRE_OK) {
        consumer_skip(c, m, derr, why);
        rd_kafka_message_destroy(m);
        free(r);
        return 0;
    }
    if (m->key_len)
        memcpy(r->key, m->key, m->key_len);
    r->raw = m;
    rec->topic = rd_kafka_topic_name(m->rkt);
    rec->partition = m->partition;
    rec->offset = m->offset;
    rec->key = r->key;
    rec->key_len = m->key_len;
    rec->timestamp_ms = rd_kafka_message_timestamp(m, NULL);
    rec->payload = m->payload;
    rec->len = m->len;
    c->received++;
    *out = rec;
    return 1;
}

void cmr_consumer_done(cmr_consumer_t *c, const cmr_record_t *rec)
{
    if (c->assigned) { /* nothing is committed: the position lives in the consumer */
        c->done++;
        return;
    }
    const record_impl_t *r = (const record_impl_t *)rec;
    rd_kafka_resp_err_t err = rd_kafka_offset_store(r->raw->rkt, rec->partition, rec->offset);
    if (err)
        cmr_log(CMR_LOG_WARN, "kafka.offset_store_failed", "topic=%s partition=%d offset=%lld error=\"%s\"", rec->topic,
                rec->partition, (long long)rec->offset, rd_kafka_err2str(err));
    else
        c->done++;
}

int cmr_consumer_commit(cmr_consumer_t *c)
{
    if (c->assigned)
        return 0;
    rd_kafka_resp_err_t err = commit_stored(c->rk, commit_wait_ms(c));
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
    out->held_back = c->held_back;
}

int cmr_consumer_assignment(cmr_consumer_t *c, cmr_partition_t **out, size_t *count)
{
    *out = NULL;
    *count = 0;
    rd_kafka_topic_partition_list_t *list = NULL;
    if (rd_kafka_assignment(c->rk, &list) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return -1;
    /* one block: the array, then the topic names it points at */
    size_t n = (size_t)list->cnt, names = 0;
    for (size_t i = 0; i < n; i++)
        names += strlen(list->elems[i].topic) + 1;
    cmr_partition_t *parts = malloc(n * sizeof *parts + names + 1);
    if (parts) {
        char *name = (char *)(parts + n);
        for (size_t i = 0; i < n; i++) {
            size_t len = strlen(list->elems[i].topic) + 1;
            memcpy(name, list->elems[i].topic, len);
            parts[i] = (cmr_partition_t){name, list->elems[i].partition, CMR_OFFSET_INVALID};
            name += len;
        }
        *out = parts;
        *count = n;
    }
    rd_kafka_topic_partition_list_destroy(list);
    return parts ? 0 : -1;
}

int cmr_consumer_lag(cmr_consumer_t *c, cmr_partition_t **out, size_t *count)
{
    if (cmr_consumer_assignment(c, out, count) != 0)
        return -1;
    rd_kafka_topic_partition_list_t *list = cmr_kafka_list_of(*out, *count);
    if (!list || rd_kafka_position(c->rk, list) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        if (list)
            rd_kafka_topic_partition_list_destroy(list);
        free(*out);
        *out = NULL;
        *count = 0;
        return -1;
    }
    for (size_t i = 0; i < *count; i++) {
        int64_t low = 0, high = -1, pos = list->elems[i].offset;
        (*out)[i].offset = CMR_OFFSET_INVALID;
        if (pos >= 0 &&
            rd_kafka_get_watermark_offsets(c->rk, (*out)[i].topic, (*out)[i].partition, &low, &high) ==
                RD_KAFKA_RESP_ERR_NO_ERROR &&
            high >= pos)
            (*out)[i].offset = high - pos;
    }
    rd_kafka_topic_partition_list_destroy(list);
    return 0;
}

int cmr_consumer_committed(cmr_consumer_t *c, cmr_partition_t *parts, size_t count, int timeout_ms)
{
    rd_kafka_topic_partition_list_t *list = cmr_kafka_list_of(parts, count);
    if (!list)
        return -1;
    rd_kafka_resp_err_t err = rd_kafka_committed(c->rk, list, timeout_ms);
    if (err) {
        cmr_log(CMR_LOG_WARN, "kafka.committed_failed", "error=\"%s\"", rd_kafka_err2str(err));
    } else {
        assert(list->cnt == (int)count); /* filled in place, in order */
        for (size_t i = 0; i < count; i++)
            parts[i].offset = list->elems[i].err ? CMR_OFFSET_INVALID : list->elems[i].offset;
    }
    rd_kafka_topic_partition_list_destroy(list);
    return err ? -1 : 0;
}

int cmr_consumer_pause(cmr_consumer_t *c, const cmr_partition_t *parts, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (paused_add(c, parts[i].topic, parts[i].partition) != 0)
            return -1;
    if (!c->in_rebalance)
        return pause_resume(c, parts, count, true);
    /* not assigned yet: paused right after the assign */
    if (!c->deferred_pauses)
        c->deferred_pauses = rd_kafka_topic_partition_list_new((int)count);
    for (size_t i = 0; c->deferred_pauses && i < count; i++)
        rd_kafka_topic_partition_list_add(c->deferred_pauses, parts[i].topic, parts[i].partition);
    return c->deferred_pauses ? 0 : -1;
}

int cmr_consumer_resume(cmr_consumer_t *c, const cmr_partition_t *parts, size_t count)
{
    if (rewind_held(c, parts, count) != 0)
        return -1;
    for (size_t i = 0; i < count; i++) {
        paused_part_t *p = paused_find(c, parts[i].topic, parts[i].partition);
        if (p)
            paused_remove(c, p);
    }
    return pause_resume(c, parts, count, false);
}

rd_kafka_t *cmr_consumer_handle(cmr_consumer_t *c)
{
    return c->rk;
}

static void close_rebalance(rd_kafka_t *rk, rd_kafka_event_t *ev, void *opaque)
{
    consumer_rebalance_cb(rk, rd_kafka_event_error(ev), rd_kafka_event_topic_partition_list(ev), opaque);
}

void cmr_consumer_close(cmr_consumer_t *c)
{
    if (!c)
        return;
    /* one bound, CLOSE_WAIT_MS, for the final commit, the close and the commit of its
     * rebalance: a cluster that is gone does not answer any of them */
    c->close_deadline_ms = cmr_mono_ms() + CLOSE_WAIT_MS;
    cmr_consumer_commit(c);
    /* rd_kafka_consumer_close() waits for the group without bound: closed here until the
     * deadline, its rebalance handed to the callback as librdkafka's close would; past it
     * the handle is destroyed without leaving the group (the coordinator then drops the
     * member after its session timeout) */
    /* librdkafka 2.0 destroys a consumer whose coordinator is gone only after the group's
     * session timeout (destroy.c): past the bound c stays allocated for its callbacks */
    if (!cmr_kafka_close_within(c->rk, c->close_deadline_ms, close_rebalance, c))
        return;
    assert(!c->deferred_pauses); /* applied by the rebalance that collected them */
    while (c->npaused)
        paused_remove(c, &c->paused[c->npaused - 1]);
    free(c->paused);
    free(c);
}
