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
#include "kafka_internal.h"

#define ERRF(...) CMR_ERRF(errbuf, errlen, __VA_ARGS__)

int cmr_admin_ensure_topic(const cmr_conf_t *conf, const char *topic, int partitions, int replication, int compacted,
                           int timeout_ms, char *errbuf, size_t errlen)
{
    char err[512];
    rd_kafka_t *rk = cmr_kafka_client(RD_KAFKA_PRODUCER, conf, NULL, NULL, NULL, NULL, "admin client", errbuf, errlen);
    if (!rk)
        return -1;
    int rc = -1;
    /* asking creates the topic on clusters with auto-creation: asked twice, the first
     * request may just have created it */
    int known = cmr_kafka_topic_partitions(rk, topic, timeout_ms, NULL, NULL, 0);
    if (known == 0)
        known = cmr_kafka_topic_partitions(rk, topic, timeout_ms, NULL, NULL, 0);
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

int cmr_admin_ensure_topic_once(cmr_topic_set_t *set, const cmr_conf_t *conf, const char *topic, int timeout_ms,
                                char *errbuf, size_t errlen)
{
    size_t len = strlen(topic);
    if (cmr_map_has(&set->names, topic, len))
        return 0;
    if (cmr_admin_ensure_topic(conf, topic, 1, -1, 0, timeout_ms, errbuf, errlen) != 0)
        return -1;
    cmr_map_put(&set->names, topic, len, NULL); /* out of memory: asked for again next time */
    return 1;
}

int cmr_producer_ensure_topic_once(cmr_producer_t *p, cmr_topic_set_t *set, const cmr_conf_t *conf, const char *topic,
                                   int timeout_ms, char *errbuf, size_t errlen)
{
    size_t len = strlen(topic);
    if (cmr_map_has(&set->names, topic, len))
        return 0;
    /* usually there already (the agent makes sure of its command topic before it
     * registers): one metadata request on the producer's connection, which also warms
     * the producer's metadata of the topic */
    if (cmr_producer_topic_known(p, topic, timeout_ms) != 1) {
        if (cmr_admin_ensure_topic(conf, topic, 1, -1, 0, timeout_ms, errbuf, errlen) != 0)
            return -1;
        cmr_producer_fetch_metadata(p, topic, timeout_ms); /* the first send need not wait for it */
    }
    cmr_map_put(&set->names, topic, len, NULL); /* out of memory: asked for again next time */
    return 1;
}

int cmr_producer_ensure_topics_once(cmr_producer_t *p, cmr_topic_set_t *set, const cmr_conf_t *conf,
                                    const char *const *topics, size_t n, int timeout_ms, char *errbuf, size_t errlen)
{
    const char **unknown = calloc(n ? n : 1, sizeof *unknown);
    bool *known = calloc(n ? n : 1, sizeof *known);
    size_t nunknown = 0;
    for (size_t i = 0; unknown && i < n; i++)
        if (!cmr_map_has(&set->names, topics[i], strlen(topics[i])))
            unknown[nunknown++] = topics[i];
    int ensured = 0, rc = 0;
    if (unknown && known && nunknown > 1 &&
        cmr_producer_topics_known(p, unknown, nunknown, timeout_ms, known) > 0) /* one round trip for all */
        for (size_t i = 0; i < nunknown; i++)
            if (known[i] && cmr_map_put(&set->names, unknown[i], strlen(unknown[i]), NULL) == 0)
                ensured++;
    for (size_t i = 0; i < n; i++) { /* the rest one by one (creates what is missing) */
        int one = cmr_producer_ensure_topic_once(p, set, conf, topics[i], timeout_ms, errbuf, errlen);
        if (one < 0)
            rc = -1;
        else
            ensured += one;
    }
    free(unknown);
    free(known);
    return rc < 0 ? -1 : ensured;
}

size_t cmr_topic_set_count(const cmr_topic_set_t *set)
{
    return cmr_map_count(&set->names);
}

void cmr_topic_set_free(cmr_topic_set_t *set)
{
    cmr_map_free(&set->names);
    *set = (cmr_topic_set_t){0};
}
