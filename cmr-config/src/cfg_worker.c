/*
 * cfg_worker.c - the cmr-config worker loop (see cfg_worker.h).
 *
 * One thread: it drains the cmr.config reader (state), the cmr.registrations reader
 * (registry), then polls the group consumer for registrations to answer. Answers go to
 * the agent's command topic, created on first use (cmr_admin_ensure_topic) and remembered.
 *
 * Ownership: the worker owns every handle and the registry (decoded registrations).
 */
#include "cmr/cfg_worker.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/cfg_answer.h"
#include "cmr/reader.h"
#include "cmr/buf.h"
#include "cmr/cfg_state.h"
#include "cmr/clock.h"
#include "cmr/ids.h"
#include "cmr/kafka.h"
#include "cmr/log.h"
#include "cmr/wire.h"

typedef struct agent {
    int64_t agent_id;
    int32_t partition;
    cmr_msg_t reg; /* owned: the latest registration of this agent */
} agent_t;

typedef struct worker {
    const cmr_conf_t *conf;
    cmr_cfg_state_t *state;
    cmr_reader_t *config_reader, *registry_reader;
    cmr_consumer_t *consumer;
    cmr_producer_t *producer;
    agent_t *agents;
    size_t n_agents, cap_agents;
    cmr_topic_set_t topics_ok; /* command topics known to exist */
} worker_t;

/* --- command topics and sending ----------------------------------------------------- */

static int ensure_command_topic(worker_t *w, const char *topic)
{
    char err[256];
    if (cmr_admin_ensure_topic_once(&w->topics_ok, w->conf, topic, 10000, err, sizeof err) < 0) {
        cmr_log(CMR_LOG_ERROR, "config.command_topic_failed", "topic=%s error=\"%s\"", topic, err);
        return -1;
    }
    return 0;
}

/* Sends the answer for one registration and waits until it is delivered. 0 or -1. */
static int send_answer(worker_t *w, const cmr_agent_registration_t *reg, const char *why)
{
    char topic[CMR_TOPIC_NAME_MAX], err[256];
    if (cmr_topic_command(reg->instance_id, topic, sizeof topic) != 0) {
        cmr_log(CMR_LOG_WARN, "config.bad_instance_id", "instance=\"%s\" agent=\"%s\"", reg->instance_id,
                reg->agent_name);
        return 0; /* nothing can ever be sent to it: done */
    }
    if (ensure_command_topic(w, topic) != 0)
        return -1;
    cmr_cfg_answer_t a;
    cmr_cfg_answer(w->state, reg, cmr_wall_ms(), &a);
    int rc = a.configured
                 ? cmr_producer_send(w->producer, CMR_MSG_AGENT_CONFIGURATION, &a.cfg, topic, NULL, err, sizeof err)
                 : cmr_producer_send(w->producer, CMR_MSG_NO_ENVIRONMENT, &a.no_env, topic, NULL, err, sizeof err);
    if (rc != CMR_SEND_OK) {
        cmr_log(CMR_LOG_ERROR, "config.send_failed", "topic=%s error=\"%s\"", topic,
                rc == CMR_SEND_QUEUE_FULL ? "queue full" : err);
        return -1;
    }
    cmr_producer_stats_t before, after;
    cmr_producer_stats(w->producer, &before);
    if (cmr_producer_flush(w->producer, 30000) != 0)
        return -1;
    cmr_producer_stats(w->producer, &after);
    if (after.failed != before.failed)
        return -1;
    if (a.configured)
        cmr_log(CMR_LOG_INFO, "agent.configured",
                "why=%s agent=\"%s\" host=\"%s\" instance=%s agent_id=%016" PRIx64 " environment=%s revision=%" PRId64,
                why, reg->agent_name, reg->hostname, reg->instance_id, (uint64_t)a.cfg.agent_id, a.cfg.environment_id,
                a.cfg.revision);
    else
        cmr_log(CMR_LOG_WARN, "agent.no_environment", "agent=\"%s\" host=\"%s\" instance=%s reason=\"%s\"",
                reg->agent_name, reg->hostname, reg->instance_id, a.reason);
    return 0;
}

/* --- registry ----------------------------------------------------------------------- */

static void registry_add(worker_t *w, const cmr_reader_rec_t *rec)
{
    cmr_msg_t m;
    char err[256];
    if (cmr_msg_decode(rec->payload, rec->len, &m, err, sizeof err) != CMR_WIRE_OK)
        return; /* the group consumer logs rejected messages */
    if (m.type != CMR_MSG_AGENT_REGISTRATION) {
        cmr_msg_free(&m);
        return;
    }
    const cmr_agent_registration_t *r = &m.u.registration;
    int64_t id = (int64_t)cmr_agent_id(r->agent_name, r->hostname);
    for (size_t i = 0; i < w->n_agents; i++) {
        agent_t *a = &w->agents[i];
        if (a->agent_id != id)
            continue;
        if (a->reg.u.registration.start_time_ms > r->start_time_ms) {
            cmr_msg_free(&m); /* an older run of the same agent */
            return;
        }
        cmr_msg_free(&a->reg);
        a->reg = m;
        a->partition = rec->partition;
        return;
    }
    if (CMR_ARRAY_GROW(w->agents, w->cap_agents, w->n_agents + 1) != 0) {
        cmr_msg_free(&m);
        return;
    }
    w->agents[w->n_agents++] = (agent_t){id, rec->partition, m};
}

/* Does this worker own the registration partition (group assignment)? */
static int owns_partition(worker_t *w, int32_t partition)
{
    cmr_partition_t *parts = NULL;
    size_t n = 0;
    if (cmr_consumer_assignment(w->consumer, &parts, &n) != 0)
        return 0;
    int owned = 0;
    for (size_t i = 0; i < n && !owned; i++)
        owned = parts[i].partition == partition && strcmp(parts[i].topic, cmr_topic_name(CMR_TOPIC_REGISTRATIONS)) == 0;
    free(parts);
    return owned;
}

/* --- configuration changes ---------------------------------------------------------- */

static void on_env_changed(worker_t *w, const char *env_id)
{
    size_t sent = 0;
    for (size_t i = 0; i < w->n_agents; i++) {
        const cmr_agent_registration_t *r = &w->agents[i].reg.u.registration;
        const char *cur = cmr_cfg_agent_env(w->state, r->agent_name, &r->ip_addresses);
        if (!cur || strcmp(cur, env_id) != 0 || !owns_partition(w, w->agents[i].partition))
            continue;
        if (send_answer(w, r, "environment_changed") == 0)
            sent++;
    }
    cmr_log(CMR_LOG_INFO, "config.environment_changed", "environment=%s agents_updated=%zu", env_id, sent);
}

/* Applies a mapping change and updates the agents whose environment it changes. */
static void on_mappings_record(worker_t *w, const cmr_reader_rec_t *rec)
{
    size_t n = w->n_agents;
    char **before = calloc(n ? n : 1, sizeof *before);
    for (size_t i = 0; before && i < n; i++) {
        const cmr_agent_registration_t *r = &w->agents[i].reg.u.registration;
        const char *e = cmr_cfg_agent_env(w->state, r->agent_name, &r->ip_addresses);
        before[i] = e ? strdup(e) : NULL;
    }
    char err[256];
    int effect = cmr_cfg_state_apply(w->state, rec->payload, rec->len, NULL, err, sizeof err);
    for (size_t i = 0; before && effect == CMR_CFG_MAPPINGS_CHANGED && i < n; i++) {
        const cmr_agent_registration_t *r = &w->agents[i].reg.u.registration;
        const char *now = cmr_cfg_agent_env(w->state, r->agent_name, &r->ip_addresses);
        int same = (!now && !before[i]) || (now && before[i] && strcmp(now, before[i]) == 0);
        if (!same && now && owns_partition(w, w->agents[i].partition))
            send_answer(w, r, "mapping_changed");
        else if (!same && !now)
            cmr_log(CMR_LOG_WARN, "agent.unmapped", "agent=\"%s\" instance=%s was=%s", r->agent_name, r->instance_id,
                    before[i]);
    }
    for (size_t i = 0; before && i < n; i++)
        free(before[i]);
    free(before);
    if (effect < 0)
        cmr_log(CMR_LOG_WARN, "config.bad_record", "partition=%d offset=%" PRId64 " error=\"%s\"", rec->partition,
                rec->offset, err);
}

static void on_config_record(worker_t *w, const cmr_reader_rec_t *rec, int live)
{
    if (live && strcmp(rec->key, "mappings") == 0) {
        on_mappings_record(w, rec);
        return;
    }
    char err[256];
    const char *id = NULL;
    int effect = cmr_cfg_state_apply(w->state, rec->payload, rec->len, &id, err, sizeof err);
    if (effect < 0)
        cmr_log(CMR_LOG_WARN, "config.bad_record", "partition=%d offset=%" PRId64 " error=\"%s\"", rec->partition,
                rec->offset, err);
    else if (live && effect == CMR_CFG_ENV_CHANGED)
        on_env_changed(w, id);
    else if (live && effect == CMR_CFG_ENV_DELETED)
        cmr_log(CMR_LOG_WARN, "config.environment_deleted", "environment=%s", id);
}

/* --- the loop ----------------------------------------------------------------------- */

static int catch_up_config(worker_t *w, int64_t timeout_ms)
{
    int64_t deadline = cmr_mono_ms() + timeout_ms;
    cmr_reader_rec_t rec;
    while (!cmr_reader_caught_up(w->config_reader)) {
        if (cmr_mono_ms() > deadline) {
            cmr_log(CMR_LOG_ERROR, "config.catch_up_timeout", "topic=%s timeout_ms=%" PRId64,
                    cmr_topic_name(CMR_TOPIC_CONFIG), timeout_ms);
            return -1;
        }
        int rc = cmr_reader_poll(w->config_reader, 200, &rec);
        if (rc < 0)
            return -1;
        if (rc == 1)
            on_config_record(w, &rec, 0);
    }
    size_t nmap;
    cmr_cfg_state_mappings(w->state, &nmap, NULL);
    cmr_log(CMR_LOG_INFO, "config.loaded", "environments=%zu mappings=%zu", cmr_cfg_state_env_count(w->state), nmap);
    return 0;
}

static int drain_readers(worker_t *w)
{
    cmr_reader_rec_t rec;
    int rc;
    while ((rc = cmr_reader_poll(w->config_reader, 0, &rec)) == 1)
        on_config_record(w, &rec, 1);
    if (rc < 0)
        return -1;
    while ((rc = cmr_reader_poll(w->registry_reader, 0, &rec)) == 1)
        registry_add(w, &rec);
    return rc < 0 ? -1 : 0;
}

static int handle_registration(worker_t *w, cmr_record_t *rec)
{
    if (rec->msg.type != CMR_MSG_AGENT_REGISTRATION) {
        cmr_log(CMR_LOG_WARN, "config.foreign_message", "topic=%s partition=%d offset=%" PRId64 " type=%s", rec->topic,
                rec->partition, rec->offset, cmr_msg_type_name(rec->msg.type));
        return 0;
    }
    const cmr_agent_registration_t *r = &rec->msg.u.registration;
    cmr_log(CMR_LOG_INFO, "agent.registration", "agent=\"%s\" host=\"%s\" instance=%s attempt=%d", r->agent_name,
            r->hostname, r->instance_id, r->attempt);
    return send_answer(w, r, "registration");
}

static int setup(worker_t *w, const cmr_conf_t *conf, char *err, size_t errlen)
{
    w->conf = conf;
    w->state = cmr_cfg_state_new();
    if (!w->state)
        return -1;
    w->config_reader = cmr_reader_new(conf, cmr_topic_name(CMR_TOPIC_CONFIG), 0, err, errlen);
    if (!w->config_reader)
        return -1;
    w->registry_reader = cmr_reader_new(conf, cmr_topic_name(CMR_TOPIC_REGISTRATIONS), 0, err, errlen);
    if (!w->registry_reader)
        return -1;
    w->producer = cmr_producer_new(conf, "cmr-config", NULL, NULL, err, errlen);
    return w->producer ? 0 : -1;
}

static void teardown(worker_t *w)
{
    if (w->consumer)
        cmr_consumer_close(w->consumer);
    if (w->producer)
        cmr_producer_destroy(w->producer, 5000);
    cmr_reader_free(w->config_reader);
    cmr_reader_free(w->registry_reader);
    cmr_cfg_state_free(w->state);
    for (size_t i = 0; i < w->n_agents; i++)
        cmr_msg_free(&w->agents[i].reg);
    free(w->agents);
    cmr_topic_set_free(&w->topics_ok);
}

int cmr_cfg_worker_run(const cmr_conf_t *conf, volatile sig_atomic_t *stop)
{
    worker_t w = {0};
    char err[512] = "";
    int64_t timeout;
    int rc = 1;
    if (cmr_conf_get_int(conf, "config.catchup_timeout_ms", 60000, 1000, 3600000, &timeout, err, sizeof err) != 0) {
        fprintf(stderr, "cmr-config: %s\n", err); /* a configuration error: exit status 2 */
        return 2;
    }
    if (setup(&w, conf, err, sizeof err) != 0) {
        cmr_log(CMR_LOG_ERROR, "config.start_failed", "error=\"%s\"", err);
        goto out;
    }
    if (catch_up_config(&w, timeout) != 0)
        goto out;
    const char *topics[] = {cmr_topic_name(CMR_TOPIC_REGISTRATIONS)};
    w.consumer = cmr_consumer_new(conf, cmr_conf_get(conf, "config.group", "cmr-config"), topics, 1, NULL, NULL, err,
                                  sizeof err);
    if (!w.consumer) {
        cmr_log(CMR_LOG_ERROR, "config.start_failed", "error=\"%s\"", err);
        goto out;
    }
    cmr_log(CMR_LOG_INFO, "config.started", "group=%s", cmr_conf_get(conf, "config.group", "cmr-config"));
    while (!*stop) {
        if (drain_readers(&w) != 0)
            goto out;
        cmr_record_t *rec;
        int got = cmr_consumer_poll(w.consumer, 100, &rec);
        if (got < 0)
            goto out;
        if (got == 0)
            continue;
        if (handle_registration(&w, rec) == 0)
            cmr_consumer_done(w.consumer, rec);
        cmr_record_free(rec);
    }
    rc = 0;
    cmr_log(CMR_LOG_INFO, "config.stopped", "agents=%zu", w.n_agents);
out:
    teardown(&w);
    return rc;
}
