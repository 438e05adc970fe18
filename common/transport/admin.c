/*
 * admin.c - topic creation through the Kafka Admin API (see kafka.h).
 *
 * Used for the per-agent command topics, which appear as agents do. The topic is looked
 * up first; a missing one is requested through a metadata request (which creates it on
 * clusters that allow auto-creation, the embedded broker included) and, if still
 * missing, through CreateTopics (which needs the ACL to create topics).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/kafka.h"
#include "cmr/log.h"

#define ERRF(...)                                  \
    do {                                           \
        if (errbuf && errlen)                      \
            snprintf(errbuf, errlen, __VA_ARGS__); \
    } while (0)

/* 1 when the cluster knows the topic, 0 when not, -1 when the cluster did not answer.
 * On a cluster with auto-creation enabled, asking creates the topic. */
static int topic_known(rd_kafka_t *rk, const char *topic, int timeout_ms)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    if (!rkt)
        return -1;
    rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, rkt, &md, timeout_ms);
    int known = -1;
    if (!err && md) {
        known = 0;
        for (int i = 0; i < md->topic_cnt; i++)
            if (strcmp(md->topics[i].topic, topic) == 0 && md->topics[i].err == RD_KAFKA_RESP_ERR_NO_ERROR &&
                md->topics[i].partition_cnt > 0)
                known = 1;
    }
    if (md)
        rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(rkt);
    return known;
}

int cmr_admin_ensure_topic(const cmr_conf_t *conf, const char *topic, int partitions, int replication, int compacted,
                           int timeout_ms, char *errbuf, size_t errlen)
{
    char err[512];
    rd_kafka_conf_t *rk_conf = cmr_kafka_conf(conf, errbuf, errlen);
    if (!rk_conf)
        return -1;
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, rk_conf, err, sizeof err);
    if (!rk) {
        ERRF("cannot create admin client: %s", err);
        rd_kafka_conf_destroy(rk_conf);
        return -1;
    }
    int rc = -1;
    int known = topic_known(rk, topic, timeout_ms);
    if (known == 0) /* the first request may just have created it */
        known = topic_known(rk, topic, timeout_ms);
    if (known == 1) {
        rd_kafka_destroy(rk);
        return 0;
    }
    if (known < 0) {
        ERRF("topic %s: the cluster did not answer within %d ms", topic, timeout_ms);
        rd_kafka_destroy(rk);
        return -1;
    }
    rd_kafka_NewTopic_t *nt = rd_kafka_NewTopic_new(topic, partitions, replication, err, sizeof err);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_AdminOptions_t *opts = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
    if (!nt) {
        ERRF("topic %s: %s", topic, err);
        goto out;
    }
    if (compacted)
        rd_kafka_NewTopic_set_config(nt, "cleanup.policy", "compact");
    rd_kafka_AdminOptions_set_operation_timeout(opts, timeout_ms, err, sizeof err);
    rd_kafka_AdminOptions_set_request_timeout(opts, timeout_ms, err, sizeof err);
    rd_kafka_CreateTopics(rk, &nt, 1, opts, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, timeout_ms + 1000);
    if (!ev) {
        ERRF("topic %s: no answer from the cluster within %d ms", topic, timeout_ms);
        goto out;
    }
    if (rd_kafka_event_error(ev)) {
        ERRF("topic %s: %s", topic, rd_kafka_event_error_string(ev));
    } else {
        size_t n;
        const rd_kafka_topic_result_t **res =
            rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &n);
        rd_kafka_resp_err_t terr = n ? rd_kafka_topic_result_error(res[0]) : RD_KAFKA_RESP_ERR_NO_ERROR;
        if (terr == RD_KAFKA_RESP_ERR_NO_ERROR || terr == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
            rc = 0;
            if (terr == RD_KAFKA_RESP_ERR_NO_ERROR)
                cmr_log(CMR_LOG_DEBUG, "kafka.topic_created", "topic=%s partitions=%d", topic, partitions);
        } else {
            ERRF("topic %s: %s", topic, rd_kafka_topic_result_error_string(res[0]));
        }
    }
    rd_kafka_event_destroy(ev);
out:
    if (nt)
        rd_kafka_NewTopic_destroy(nt);
    rd_kafka_AdminOptions_destroy(opts);
    rd_kafka_queue_destroy(q);
    rd_kafka_destroy(rk);
    return rc;
}

static bool topic_set_has(const cmr_topic_set_t *set, const char *topic)
{
    for (size_t i = 0; i < set->count; i++)
        if (strcmp(set->names[i], topic) == 0)
            return true;
    return false;
}

/* Remembers topic; out of memory only means it is asked for again later. */
static void topic_set_add(cmr_topic_set_t *set, const char *topic)
{
    if (set->count == set->cap) {
        size_t cap = set->cap ? set->cap * 2 : 16;
        char **names = realloc(set->names, cap * sizeof *names);
        if (!names)
            return;
        set->names = names;
        set->cap = cap;
    }
    char *copy = strdup(topic);
    if (copy)
        set->names[set->count++] = copy;
}

int cmr_admin_ensure_topic_once(cmr_topic_set_t *set, const cmr_conf_t *conf, const char *topic, int timeout_ms,
                                char *errbuf, size_t errlen)
{
    if (topic_set_has(set, topic))
        return 0;
    if (cmr_admin_ensure_topic(conf, topic, 1, -1, 0, timeout_ms, errbuf, errlen) != 0)
        return -1;
    topic_set_add(set, topic);
    return 1;
}

void cmr_topic_set_free(cmr_topic_set_t *set)
{
    for (size_t i = 0; i < set->count; i++)
        free(set->names[i]);
    free(set->names);
    *set = (cmr_topic_set_t){0};
}
