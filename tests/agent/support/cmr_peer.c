/*
 * cmr_peer.c - the scripted CMR of the agent tests (see cmr_peer.h).
 */
#include "cmr_peer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmr/buf.h"
#include "cmr/clock.h"
#include "cmr/ids.h"
#include "cmr/log.h"

/* The peer's key pair, in a fresh temporary directory. */
static int peer_keys(cmr_peer_t *p, char *err, size_t errlen)
{
    snprintf(p->key_dir, sizeof p->key_dir, "/tmp/cmr-peer-keys-XXXXXX");
    if (!mkdtemp(p->key_dir)) {
        snprintf(err, errlen, "mkdtemp: cannot make a key directory");
        p->key_dir[0] = '\0';
        return -1;
    }
    if (cmr_trust_init() != 0 || cmr_trust_keygen(p->key_dir, "cmr", err, errlen) != 0)
        return -1;
    char secret[160];
    snprintf(secret, sizeof secret, "%s/cmr.key", p->key_dir);
    snprintf(p->public_key, sizeof p->public_key, "%s/cmr.pub", p->key_dir);
    snprintf(p->trust_option, sizeof p->trust_option, "trust.keys=%s", p->public_key);
    p->signer = cmr_signer_load(secret, err, errlen);
    return p->signer ? 0 : -1;
}

static int peer_start(cmr_peer_t *p, const char *bootstrap, bool with_data)
{
    memset(p, 0, sizeof *p);
    char err[512], group[64], rnd[17];
    uint8_t raw[8];
    if (peer_keys(p, err, sizeof err) != 0) {
        fprintf(stderr, "cmr_peer: keys: %s\n", err);
        return -1;
    }
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
    for (size_t i = 0; i < p->nsplits; i++)
        cmr_segs_batches_free(p->splits[i].v, p->splits[i].n);
    free(p->splits);
    free(p->segs);
    if (p->consumer)
        cmr_consumer_close(p->consumer);
    if (p->producer)
        cmr_producer_destroy(p->producer, 2000);
    cmr_conf_destroy(p->conf);
    cmr_signer_free(p->signer);
    if (p->key_dir[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", p->key_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "cmr_peer: could not remove %s\n", p->key_dir);
    }
    memset(p, 0, sizeof *p);
}

/* Splits an EventBatch message into its segment batches and appends them to p->segs. */
static void keep_segments(cmr_peer_t *p, const cmr_event_msg_t *m)
{
    cmr_event_batch_t *v = NULL;
    char err[200];
    long n = cmr_segs_split(m, &v, err, sizeof err);
    if (n < 0) {
        fprintf(stderr, "cmr_peer: EventBatch of agent %lld does not split: %s\n", (long long)m->agent_id, err);
        p->bad_event_msgs++;
        return;
    }
    if (CMR_ARRAY_GROW(p->splits, p->splits_cap, p->nsplits + 1) != 0 ||
        CMR_ARRAY_GROW(p->segs, p->segs_cap, p->nsegs + (size_t)n + 1) != 0) {
        fprintf(stderr, "cmr_peer: out of memory, segment batches dropped\n");
        cmr_segs_batches_free(v, (size_t)n);
        p->bad_event_msgs++;
        return;
    }
    p->splits[p->nsplits++] = (struct cmr_peer_split){v, (size_t)n};
    for (long i = 0; i < n; i++)
        p->segs[p->nsegs++] = &v[i];
}

const cmr_event_batch_t *cmr_peer_seg_batch(const cmr_peer_t *p, int64_t agent_id, int64_t segment, int32_t seq)
{
    for (size_t i = 0; i < p->nsegs; i++) {
        const cmr_event_batch_t *b = p->segs[i];
        if (b->agent_id == agent_id && b->segment_id == segment && b->batch_seq == seq)
            return b;
    }
    return NULL;
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
            if (rec->msg.type == CMR_MSG_EVENT_BATCH)
                keep_segments(p, &rec->msg.u.event_batch);
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

int cmr_peer_send_signed(cmr_peer_t *p, const cmr_signer_t *signer, const char *target_instance,
                         const char *topic_instance, cmr_msg_type_t type, const void *msg)
{
    char topic[CMR_TOPIC_NAME_MAX], err[256];
    if (cmr_topic_command(topic_instance, topic, sizeof topic) != 0)
        return -1;
    if (cmr_command_send(p->producer, signer, target_instance, topic, CMR_COMMAND_DEFAULT_LIFETIME_MS, type, msg, NULL,
                         err, sizeof err) != CMR_SEND_OK) {
        fprintf(stderr, "cmr_peer: %s\n", err);
        return -1;
    }
    return cmr_producer_flush(p->producer, 10000);
}

int cmr_peer_command(cmr_peer_t *p, const char *instance_id, cmr_msg_type_t type, const void *msg)
{
    return cmr_peer_send_signed(p, p->signer, instance_id, instance_id, type, msg);
}

int cmr_peer_send_raw(cmr_peer_t *p, const char *instance_id, cmr_msg_type_t type, const void *msg)
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

cmr_signer_t *cmr_peer_new_signer(cmr_peer_t *p)
{
    char name[32], path[160], err[256];
    snprintf(name, sizeof name, "other%d", ++p->extra_keys);
    if (cmr_trust_keygen(p->key_dir, name, err, sizeof err) != 0) {
        fprintf(stderr, "cmr_peer: keygen: %s\n", err);
        return NULL;
    }
    snprintf(path, sizeof path, "%s/%s.key", p->key_dir, name);
    cmr_signer_t *s = cmr_signer_load(path, err, sizeof err);
    if (!s)
        fprintf(stderr, "cmr_peer: %s\n", err);
    return s;
}

int cmr_peer_wrap(cmr_peer_t *p, const char *instance_id, cmr_msg_type_t type, const void *msg, cmr_peer_envelope_t *w)
{
    memset(w, 0, sizeof *w);
    char err[256];
    if (cmr_command_wrap(p->signer, instance_id, CMR_COMMAND_DEFAULT_LIFETIME_MS, type, msg, &w->payload, &w->env,
                         w->key_id, w->signature, err, sizeof err) != 0) {
        fprintf(stderr, "cmr_peer: %s\n", err);
        return -1;
    }
    return 0;
}

void cmr_peer_envelope_free(cmr_peer_envelope_t *w)
{
    cmr_buf_free(&w->payload);
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
