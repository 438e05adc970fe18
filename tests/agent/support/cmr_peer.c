/*
 * cmr_peer.c - the scripted CMR of the agent tests (see cmr_peer.h).
 */
#include "cmr_peer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/buf.h"
#include "cmr/clock.h"
#include "cmr/ids.h"
#include "cmr/log.h"

static int peer_start(cmr_peer_t *p, const char *bootstrap, bool with_data)
{
    memset(p, 0, sizeof *p);
    char err[512], group[64], rnd[17];
    uint8_t raw[8];
    p->conf = cmr_conf_new();
    cmr_conf_set(p->conf, "kafka.bootstrap.servers", bootstrap, "test");
    cmr_conf_set(p->conf, "kafka.topic.metadata.refresh.interval.ms", "1000", "test");
    cmr_conf_set(p->conf, "kafka.reconnect.backoff.max.ms", "1000", "test");
    p->producer = cmr_producer_new(p->conf, "cmr-peer", NULL, NULL, err, sizeof err);
    cmr_random_bytes(raw, sizeof raw);
    cmr_hex(raw, sizeof raw, rnd);
    snprintf(group, sizeof group, "cmr-peer-%s", rnd);
    const char *topics[] = {cmr_topic_name(CMR_TOPIC_REGISTRATIONS), cmr_topic_name(CMR_TOPIC_CLASSES),
                            cmr_topic_name(CMR_TOPIC_AGENT_EVENTS), cmr_topic_name(CMR_TOPIC_EVENTS),
                            cmr_topic_name(CMR_TOPIC_METRICS)};
    /* events and metrics last: a control-only peer takes the first three */
    p->consumer = cmr_consumer_new(p->conf, group, topics, with_data ? 5 : 3, NULL, NULL, err, sizeof err);
    if (!p->producer || !p->consumer) {
        fprintf(stderr, "cmr_peer: %s\n", err);
        return -1;
    }
    return 0;
}

int cmr_peer_start(cmr_peer_t *p, const char *bootstrap)
{
    return peer_start(p, bootstrap, true);
}

int cmr_peer_start_control_only(cmr_peer_t *p, const char *bootstrap)
{
    return peer_start(p, bootstrap, false);
}

void cmr_peer_stop(cmr_peer_t *p)
{
    for (size_t i = 0; i < p->n; i++)
        cmr_record_free(p->recs[i]);
    free(p->recs);
    if (p->consumer)
        cmr_consumer_close(p->consumer);
    if (p->producer)
        cmr_producer_destroy(p->producer, 2000);
    cmr_conf_destroy(p->conf);
    memset(p, 0, sizeof *p);
}

void cmr_peer_poll(cmr_peer_t *p, int ms)
{
    int64_t deadline = cmr_mono_ms() + ms;
    do {
        cmr_record_t *rec;
        if (cmr_consumer_poll(p->consumer, 50, &rec) == 1) {
            cmr_consumer_done(p->consumer, rec);
            if (CMR_ARRAY_GROW(p->recs, p->cap, p->n + 1) != 0) {
                fprintf(stderr, "cmr_peer: out of memory, record dropped\n");
                cmr_record_free(rec);
                continue;
            }
            p->recs[p->n++] = rec;
        }
    } while (cmr_mono_ms() < deadline);
}

static const cmr_record_t *find(cmr_peer_t *p, cmr_msg_type_t type, cmr_peer_match_fn fn, const void *ud, size_t k)
{
    size_t seen = 0;
    for (size_t i = 0; i < p->n; i++) {
        const cmr_msg_t *m = &p->recs[i]->msg;
        if (m->type == type && (!fn || fn(m, ud)) && seen++ == k)
            return p->recs[i];
    }
    return NULL;
}

const cmr_record_t *cmr_peer_wait(cmr_peer_t *p, cmr_msg_type_t type, cmr_peer_match_fn fn, const void *ud, size_t k,
                                  int timeout_ms)
{
    int64_t deadline = cmr_mono_ms() + timeout_ms;
    for (;;) {
        const cmr_record_t *r = find(p, type, fn, ud, k);
        if (r || cmr_mono_ms() >= deadline)
            return r;
        cmr_peer_poll(p, 50);
    }
}

size_t cmr_peer_count(cmr_peer_t *p, cmr_msg_type_t type, cmr_peer_match_fn fn, const void *ud)
{
    size_t n = 0;
    for (size_t i = 0; i < p->n; i++)
        if (p->recs[i]->msg.type == type && (!fn || fn(&p->recs[i]->msg, ud)))
            n++;
    return n;
}

int cmr_peer_command(cmr_peer_t *p, const char *instance_id, cmr_msg_type_t type, const void *msg)
{
    char topic[CMR_TOPIC_NAME_MAX], err[256];
    if (cmr_topic_command(instance_id, topic, sizeof topic) != 0)
        return -1;
    if (cmr_producer_send(p->producer, type, msg, topic, NULL, err, sizeof err) != CMR_SEND_OK) {
        fprintf(stderr, "cmr_peer: %s\n", err);
        return -1;
    }
    return cmr_producer_flush(p->producer, 10000);
}

bool cmr_peer_of_instance(const cmr_msg_t *m, const void *ud)
{
    const char *id = ud;
    switch (m->type) {
    case CMR_MSG_AGENT_REGISTRATION: return strcmp(m->u.registration.instance_id, id) == 0;
    case CMR_MSG_CLASS_LOADED: return strcmp(m->u.class_loaded.instance_id, id) == 0;
    case CMR_MSG_REDEFINE_RESULT: return strcmp(m->u.redefine_result.instance_id, id) == 0;
    case CMR_MSG_AGENT_STATUS: return strcmp(m->u.agent_status.instance_id, id) == 0;
    default: return false;
    }
}

bool cmr_peer_of_agent(const cmr_msg_t *m, const void *ud)
{
    int64_t id = *(const int64_t *)ud;
    switch (m->type) {
    case CMR_MSG_EVENT_BATCH: return m->u.event_batch.agent_id == id;
    case CMR_MSG_METRIC_BATCH: return m->u.metric_batch.agent_id == id;
    case CMR_MSG_CLASS_LOADED: return m->u.class_loaded.agent_id == id;
    case CMR_MSG_AGENT_STATUS: return m->u.agent_status.agent_id == id;
    default: return false;
    }
}
