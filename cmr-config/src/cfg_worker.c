/*
 * cfg_worker.c - the cmr-config worker loop (see cfg_worker.h).
 *
 * One thread: it drains the cmr.config reader (state), the cmr.registrations reader
 * (registry), then polls the group consumer for registrations to answer. Answers go to
 * the agent's command topic, created on first use (cmr_admin_ensure_topic) and remembered.
 * Every answer is a command, signed for the agent's instance with the key of
 * trust.signing_key (cmr_command_send); the worker does not start without that key.
 *
 * Ownership: the worker owns every handle, the signer and the registry (decoded
 * registrations).
 */
#include "cmr/cfg_worker.h"
#include "cmr/cfg_diagnose.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmr/cfg_answer.h"
#include "cmr/reader.h"
#include "cmr/buf.h"
#include "cmr/cfg_state.h"
#include "cmr/clock.h"
#include "cmr/command.h"
#include "cmr/ids.h"
#include "cmr/kafka.h"
#include "cmr/log.h"
#include "cmr/metrics_http.h"
#include "cmr/rejects.h"
#include "cmr/map.h"
#include "cmr/wire.h"

/* One running JVM (instance): its agent id is per instance (cmr_agent_id of name, host and
 * instance id), so two JVMs started with the same name on one host are two entries and
 * both get every configuration change. */
typedef struct agent {
    int64_t agent_id;
    int32_t partition;
    cmr_msg_t reg; /* owned: the latest registration of this instance */
} agent_t;

/* Why a message on cmr.registrations or cmr.config is refused (counted per reason). */
typedef enum reject_reason {
    REJECT_BAD_INSTANCE_ID,   /* not 32 lower-case hex characters: no command topic */
    REJECT_FIELD_TOO_LONG,    /* a field past the limits below, or no agent name */
    REJECT_FOREIGN_TYPE,      /* a decodable message of another type */
    REJECT_BAD_CONFIG_RECORD, /* a cmr.config record that is no ConfigChange */
    N_REJECT
} reject_reason_t;

/* Limits of a registration's fields (the agent's own: agent.name < 128, host < 256). */
#define REG_NAME_MAX 127
#define REG_HOST_MAX 255
#define REG_TEXT_MAX 256
#define REG_ADDRESSES_MAX 256
#define REG_ADDRESS_MAX 63

typedef struct worker {
    const cmr_conf_t *conf;
    cmr_cfg_state_t *state;
    cmr_reader_client_t *readers; /* owned: the handle of the readers below */
    cmr_reader_t *config_reader, *registry_reader;
    cmr_reader_t *diag_reader, *alerts_reader; /* cmr.diagnoses (all), cmr.alerts (from a minute ago) */
    cmr_reader_t *status_reader;               /* cmr.agent-events (from a minute ago): agents' ends */
    cmr_cfg_diag_worker_t diag;                /* diagnoses: threshold starts, time to live */
    int64_t diag_ticked_ms;
    cmr_consumer_t *consumer;
    cmr_producer_t *producer;
    agent_t *agents;
    size_t n_agents, cap_agents;
    cmr_u64map_t agent_index;  /* agent id -> index in agents + 1 */
    cmr_topic_set_t topics_ok; /* command topics known to exist */
    /* Counters: atomic, the /metrics thread reads them while the worker runs. */
    _Atomic uint64_t rejected[N_REJECT];         /* messages refused, per reason */
    _Atomic uint64_t agents_known;               /* n_agents, for /metrics */
    _Atomic uint64_t configured, no_environment; /* answers sent */
    cmr_log_limiter_t reject_log[N_REJECT];
    cmr_signer_t *signer; /* owned: signs every command */
    int64_t lifetime_ms;  /* of every command (trust.command.lifetime.ms) */
    cmr_lag_gauge_t lag;  /* the group consumer's lag per partition, for /metrics */
} worker_t;

/* --- rejected messages -------------------------------------------------------------- */

static const char *const reject_names[N_REJECT] = {
    [REJECT_BAD_INSTANCE_ID] = "bad_instance_id",
    [REJECT_FIELD_TOO_LONG] = "field_too_long",
    [REJECT_FOREIGN_TYPE] = "foreign_type",
    [REJECT_BAD_CONFIG_RECORD] = "bad_config_record",
};

/* Counts a refused message and logs it (at most 5 lines a second per reason; the line says
 * how many were suppressed since the last one). `what` is escaped already. */
static void reject(worker_t *w, reject_reason_t why, const char *topic, int32_t partition, int64_t offset,
                   const char *what)
{
    uint64_t count = atomic_fetch_add(&w->rejected[why], 1) + 1;
    cmr_reject_count(topic, reject_names[why]);
    unsigned long long suppressed = 0;
    if (cmr_log_allow(&w->reject_log[why], 5, &suppressed))
        cmr_log(CMR_LOG_WARN, "config.rejected",
                "topic=%s partition=%d offset=%" PRId64 " reason=%s %s count=%" PRIu64 " suppressed=%llu", topic,
                partition, offset, reject_names[why], what, count, suppressed);
}

static void log_reject_totals(worker_t *w)
{
    for (int i = 0; i < N_REJECT; i++) {
        uint64_t n = atomic_load(&w->rejected[i]);
        if (n)
            cmr_log(CMR_LOG_INFO, "config.rejected_total", "reason=%s count=%" PRIu64, reject_names[i], n);
    }
}

/* GET /metrics (on a server thread): the worker's atomic counters only. */
static void metrics_fill(cmr_buf_t *out, void *opaque)
{
    worker_t *w = opaque;
    cmr_prom_family(out, "cmr_config_agents", "gauge", "agent instances in the registry (cmr.registrations)");
    cmr_prom_sample_u64(out, "cmr_config_agents", NULL, 0, atomic_load(&w->agents_known));
    cmr_prom_family(out, "cmr_config_answers_total", "counter", "registration answers sent, per kind");
    cmr_prom_label_t l = {"kind", "configuration"};
    cmr_prom_sample_u64(out, "cmr_config_answers_total", &l, 1, atomic_load(&w->configured));
    l.value = "no_environment";
    cmr_prom_sample_u64(out, "cmr_config_answers_total", &l, 1, atomic_load(&w->no_environment));
    cmr_prom_family(out, "cmr_config_rejected_total", "counter",
                    "messages on cmr.registrations or cmr.config refused, per reason");
    for (int i = 0; i < N_REJECT; i++) {
        l = (cmr_prom_label_t){"reason", reject_names[i]};
        cmr_prom_sample_u64(out, "cmr_config_rejected_total", &l, 1, atomic_load(&w->rejected[i]));
    }
    cmr_lag_gauge_write(&w->lag, out);
}

/* Escaped copies of what an agent says about itself, for log lines (log.h: every value
 * from outside goes through cmr_log_escape). */
typedef struct reg_esc {
    char name[4 * REG_NAME_MAX + 8], host[4 * REG_HOST_MAX + 8], instance[140]; /* whole when within the limits */
} reg_esc_t;

static const reg_esc_t *escape_reg(const cmr_agent_registration_t *r, reg_esc_t *e)
{
    cmr_log_escape(r->agent_name, e->name, sizeof e->name);
    cmr_log_escape(r->hostname, e->host, sizeof e->host);
    cmr_log_escape(r->instance_id, e->instance, sizeof e->instance);
    return e;
}

static int valid_instance_id(const char *s)
{
    size_t n = 0;
    for (; s && s[n]; n++)
        if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f')))
            return 0;
    return n == 32; /* cmr_instance_id_new(): 32 lower-case hex characters */
}

static int too_long(const char *s, size_t max)
{
    return s && strnlen(s, max + 1) > max;
}

/* Why a registration is refused (the agent writes the fields; anyone who can write to
 * cmr.registrations can too), or -1 when it is acceptable. */
static int registration_problem(const cmr_agent_registration_t *r)
{
    if (!valid_instance_id(r->instance_id))
        return REJECT_BAD_INSTANCE_ID;
    int bad = !r->agent_name || !*r->agent_name || too_long(r->agent_name, REG_NAME_MAX) ||
              too_long(r->hostname, REG_HOST_MAX) || too_long(r->jvm_vendor, REG_TEXT_MAX) ||
              too_long(r->jvm_version, REG_TEXT_MAX) || too_long(r->agent_version, REG_TEXT_MAX) ||
              r->ip_addresses.count > REG_ADDRESSES_MAX;
    for (size_t i = 0; !bad && i < r->ip_addresses.count; i++)
        bad = too_long(r->ip_addresses.items[i], REG_ADDRESS_MAX);
    return bad ? REJECT_FIELD_TOO_LONG : -1;
}

/* The registry (every partition) skips what registration_problem() refuses without a
 * word: the group consumer counts and logs each such message once. */
static int registration_rejected(const cmr_agent_registration_t *r)
{
    return registration_problem(r) >= 0;
}

/* --- command topics and sending ----------------------------------------------------- */

static int ensure_command_topic(worker_t *w, const char *topic)
{
    char err[256];
    if (cmr_producer_ensure_topic_once(w->producer, &w->topics_ok, w->conf, topic, 10000, err, sizeof err) < 0) {
        cmr_log(CMR_LOG_ERROR, "config.command_topic_failed", "topic=%s error=\"%s\"", topic, err);
        return -1;
    }
    return 0;
}

/* Waits until every queued message is delivered or failed (reported by the producer's own
 * thread), polling the outstanding count finely: rd_kafka_flush() sleeps in 10 ms steps
 * when another thread serves the delivery reports, which would add to every answer.
 * 0, or -1 when messages are still outstanding after timeout_ms. */
static int wait_delivered(cmr_producer_t *p, int timeout_ms)
{
    int64_t deadline = cmr_mono_ms() + timeout_ms;
    while (cmr_producer_outstanding(p) > 0) {
        if (cmr_mono_ms() > deadline) {
            cmr_log(CMR_LOG_ERROR, "config.delivery_timeout", "outstanding=%d", cmr_producer_outstanding(p));
            return -1;
        }
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* Sends the answer for one registration and waits until it is delivered. 0 or -1. */
static int send_answer(worker_t *w, const cmr_agent_registration_t *reg, const char *why)
{
    char topic[CMR_TOPIC_NAME_MAX], err[256];
    reg_esc_t e;
    escape_reg(reg, &e);
    if (cmr_topic_command(reg->instance_id, topic, sizeof topic) != 0) {
        cmr_log(CMR_LOG_WARN, "config.bad_instance_id", "instance=\"%s\" agent=\"%s\"", e.instance, e.name);
        return 0; /* nothing can ever be sent to it: done */
    }
    if (ensure_command_topic(w, topic) != 0)
        return -1;
    cmr_cfg_answer_t a;
    cmr_cfg_answer(w->state, reg, cmr_wall_ms(), &a);
    if (a.configured) { /* the fleet's trace-context MAC key, derived from the signing key */
        cmr_signer_derive_key(w->signer, CMR_TRACE_CONTEXT_KEY_CONTEXT, a.trace_key);
        a.cfg.trace_context.key = (cmr_bytes_t){a.trace_key, sizeof a.trace_key};
    }
    int rc = a.configured ? cmr_command_send(w->producer, w->signer, reg->instance_id, topic, w->lifetime_ms,
                                             CMR_MSG_AGENT_CONFIGURATION, &a.cfg, err, sizeof err)
                          : cmr_command_send(w->producer, w->signer, reg->instance_id, topic, w->lifetime_ms,
                                             CMR_MSG_NO_ENVIRONMENT, &a.no_env, err, sizeof err);
    if (rc != CMR_SEND_OK) {
        cmr_log(CMR_LOG_ERROR, "config.send_failed", "topic=%s error=\"%s\"", topic,
                rc == CMR_SEND_QUEUE_FULL ? "queue full" : err);
        return -1;
    }
    cmr_producer_stats_t before, after;
    cmr_producer_stats(w->producer, &before);
    if (wait_delivered(w->producer, 30000) != 0)
        return -1;
    cmr_producer_stats(w->producer, &after);
    if (after.failed != before.failed)
        return -1;
    atomic_fetch_add(a.configured ? &w->configured : &w->no_environment, 1);
    char reason[sizeof a.reason * 4];
    if (a.configured)
        cmr_log(CMR_LOG_INFO, "agent.configured",
                "why=%s agent=\"%s\" host=\"%s\" instance=%s agent_id=%016" PRIx64 " environment=%s revision=%" PRId64,
                why, e.name, e.host, e.instance, (uint64_t)a.cfg.agent_id, a.cfg.environment_id, a.cfg.revision);
    else
        cmr_log(CMR_LOG_WARN, "agent.no_environment", "agent=\"%s\" host=\"%s\" instance=%s reason=\"%s\"", e.name,
                e.host, e.instance, cmr_log_escape(a.reason, reason, sizeof reason));
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
    if (registration_rejected(r)) {
        cmr_msg_free(&m);
        return;
    }
    int64_t id = (int64_t)cmr_agent_id(r->agent_name, r->hostname, r->instance_id);
    uintptr_t at = (uintptr_t)cmr_u64map_get(&w->agent_index, (uint64_t)id);
    if (at) { /* the same instance again (a repeated registration) */
        agent_t *a = &w->agents[at - 1];
        cmr_msg_free(&a->reg);
        a->reg = m;
        a->partition = rec->partition;
        return;
    }
    if (CMR_ARRAY_GROW(w->agents, w->cap_agents, w->n_agents + 1) != 0 ||
        cmr_u64map_put(&w->agent_index, (uint64_t)id, (void *)(uintptr_t)(w->n_agents + 1)) != 0) {
        cmr_msg_free(&m);
        return;
    }
    w->agents[w->n_agents++] = (agent_t){id, rec->partition, m};
    atomic_store(&w->agents_known, w->n_agents);
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

/* A cmr.config record that is no ConfigChange (counted; the error names no content). */
static void reject_config_record(worker_t *w, const cmr_reader_rec_t *rec, const char *err)
{
    char what[600], esc[560];
    snprintf(what, sizeof what, "error=\"%s\"", cmr_log_escape(err, esc, sizeof esc));
    reject(w, REJECT_BAD_CONFIG_RECORD, cmr_topic_name(CMR_TOPIC_CONFIG), rec->partition, rec->offset, what);
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
        else if (!same && !now) {
            reg_esc_t e;
            escape_reg(r, &e);
            cmr_log(CMR_LOG_WARN, "agent.unmapped", "agent=\"%s\" host=\"%s\" instance=%s was=%s", e.name, e.host,
                    e.instance, before[i]);
        }
    }
    for (size_t i = 0; before && i < n; i++)
        free(before[i]);
    free(before);
    if (effect < 0)
        reject_config_record(w, rec, err);
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
        reject_config_record(w, rec, err);
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
    if (rc < 0)
        return -1;
    while ((rc = cmr_reader_poll(w->diag_reader, 0, &rec)) == 1)
        cmr_cfg_diag_on_record(&w->diag, rec.payload, rec.len);
    if (rc < 0)
        return -1;
    /* threshold events act once the diagnoses are read whole: nothing is started twice */
    while (cmr_reader_caught_up(w->diag_reader) && (rc = cmr_reader_poll(w->alerts_reader, 0, &rec)) == 1) {
        cmr_msg_t m;
        char err[256];
        if (cmr_msg_decode(rec.payload, rec.len, &m, err, sizeof err) != CMR_WIRE_OK)
            continue; /* counted by the decoder's rejects */
        if (m.type == CMR_MSG_THRESHOLD_EVENT)
            cmr_cfg_diag_on_threshold(&w->diag, w->producer, &m.u.threshold_event, cmr_wall_ms());
        cmr_msg_free(&m);
    }
    if (rc < 0)
        return -1;
    for (int i = 0;
         i < 256 && cmr_reader_caught_up(w->diag_reader) && (rc = cmr_reader_poll(w->status_reader, 0, &rec)) == 1;
         i++) {
        cmr_msg_t m;
        char err[256];
        if (cmr_msg_decode(rec.payload, rec.len, &m, err, sizeof err) != CMR_WIRE_OK)
            continue;
        if (m.type == CMR_MSG_AGENT_STATUS && m.u.agent_status.diagnoses.count)
            cmr_cfg_diag_on_agent_status(&w->diag, w->producer, &m.u.agent_status, cmr_wall_ms());
        cmr_msg_free(&m);
    }
    if (rc < 0)
        return -1;
    int64_t now = cmr_mono_ms();
    if (cmr_reader_caught_up(w->diag_reader) && now - w->diag_ticked_ms >= 1000) {
        cmr_cfg_diag_tick(&w->diag, w->producer, cmr_wall_ms());
        w->diag_ticked_ms = now;
    }
    return 0;
}

static int handle_registration(worker_t *w, cmr_record_t *rec)
{
    char what[2048];
    if (rec->msg.type != CMR_MSG_AGENT_REGISTRATION) {
        snprintf(what, sizeof what, "type=%s", cmr_msg_type_name(rec->msg.type));
        reject(w, REJECT_FOREIGN_TYPE, rec->topic, rec->partition, rec->offset, what);
        return 0;
    }
    const cmr_agent_registration_t *r = &rec->msg.u.registration;
    reg_esc_t e;
    escape_reg(r, &e);
    int problem = registration_problem(r);
    if (problem >= 0) {
        snprintf(what, sizeof what, "agent=\"%s\" host=\"%s\" instance=\"%s\"", e.name, e.host, e.instance);
        reject(w, (reject_reason_t)problem, rec->topic, rec->partition, rec->offset, what);
        return 0; /* done: it is never answered */
    }
    cmr_log(CMR_LOG_INFO, "agent.registration",
            "agent=\"%s\" host=\"%s\" instance=%s agent_id=%016" PRIx64 " attempt=%d", e.name, e.host, e.instance,
            cmr_agent_id(r->agent_name, r->hostname, r->instance_id), r->attempt);
    return send_answer(w, r, "registration");
}

static int setup(worker_t *w, const cmr_conf_t *conf, char *err, size_t errlen)
{
    w->conf = conf;
    w->state = cmr_cfg_state_new();
    if (!w->state)
        return -1;
    if (!(w->readers = cmr_reader_client_new(conf, err, errlen)))
        return -1;
    w->config_reader = cmr_reader_open(w->readers, cmr_topic_name(CMR_TOPIC_CONFIG), 0, err, errlen);
    if (!w->config_reader)
        return -1;
    w->registry_reader = cmr_reader_open(w->readers, cmr_topic_name(CMR_TOPIC_REGISTRATIONS), 0, err, errlen);
    if (!w->registry_reader)
        return -1;
    const cmr_topic_t diag_topics[3] = {CMR_TOPIC_DIAGNOSES, CMR_TOPIC_ALERTS, CMR_TOPIC_AGENT_EVENTS};
    for (int i = 0; i < 3; i++) {
        const cmr_topic_layout_t *l = cmr_topic_layout(diag_topics[i]);
        if (cmr_admin_ensure_topic(conf, cmr_topic_name(diag_topics[i]), l->partitions, -1, l->compacted, 15000, err,
                                   errlen) != 0)
            cmr_log(CMR_LOG_WARN, "config.topic_missing", "topic=%s error=\"%s\"", cmr_topic_name(diag_topics[i]), err);
    }
    if (cmr_cfg_diag_worker_init(&w->diag, conf, err, errlen) != 0)
        return -1;
    w->diag_reader = cmr_reader_open(w->readers, cmr_topic_name(CMR_TOPIC_DIAGNOSES), 0, err, errlen);
    if (!w->diag_reader)
        return -1;
    /* threshold events of the last minute on: older ones were acted upon before */
    w->alerts_reader =
        cmr_reader_open(w->readers, cmr_topic_name(CMR_TOPIC_ALERTS), cmr_wall_ms() - 60000, err, errlen);
    if (!w->alerts_reader)
        return -1;
    w->status_reader =
        cmr_reader_open(w->readers, cmr_topic_name(CMR_TOPIC_AGENT_EVENTS), cmr_wall_ms() - 60000, err, errlen);
    if (!w->status_reader)
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
    cmr_reader_free(w->diag_reader);
    cmr_reader_free(w->alerts_reader);
    cmr_reader_free(w->status_reader);
    cmr_reader_client_free(w->readers); /* after its readers */
    cmr_cfg_diag_worker_free(&w->diag);
    cmr_cfg_state_free(w->state);
    for (size_t i = 0; i < w->n_agents; i++)
        cmr_msg_free(&w->agents[i].reg);
    free(w->agents);
    cmr_u64map_free(&w->agent_index);
    cmr_topic_set_free(&w->topics_ok);
    cmr_signer_free(w->signer);
}

int cmr_cfg_worker_run(const cmr_conf_t *conf, volatile sig_atomic_t *stop)
{
    worker_t w = {0};
    cmr_lag_gauge_init(&w.lag, cmr_conf_get(conf, "config.group", "cmr-config"));
    char err[512] = "";
    int64_t timeout;
    int rc = 1;
    if (cmr_conf_get_int(conf, "config.catchup_timeout_ms", 60000, 1000, 3600000, &timeout, err, sizeof err) != 0) {
        fprintf(stderr, "cmr-config: %s\n", err); /* a configuration error: exit status 2 */
        return 2;
    }
    w.signer = cmr_command_signer_load(conf, "cmr-config", "config.signing_key",
                                       &w.lifetime_ms); /* before connecting to anything */
    if (!w.signer)
        return 2;
    cmr_metrics_http_t *metrics = NULL;
    if (cmr_metrics_http_start(conf, metrics_fill, &w, &metrics, err, sizeof err) != 0) {
        cmr_log(CMR_LOG_ERROR, "config.start_failed", "error=\"%s\"", err);
        cmr_signer_free(w.signer);
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
    int64_t last_summary = cmr_mono_ms();
    while (!*stop) {
        cmr_lag_gauge_refresh(&w.lag, w.consumer);
        if (cmr_mono_ms() - last_summary >= 10000) { /* rejected messages, per topic and reason */
            cmr_rejects_log_summary();
            last_summary = cmr_mono_ms();
        }
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
    log_reject_totals(&w);
    cmr_log(CMR_LOG_INFO, "config.stopped", "agents=%zu", w.n_agents);
out:
    cmr_metrics_http_stop(metrics); /* before w goes: its thread reads w */
    teardown(&w);
    cmr_lag_gauge_free(&w.lag);
    return rc;
}
