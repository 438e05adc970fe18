/*
 * cfg_worker.c - the cmr-config worker loop (see cfg_worker.h).
 *
 * One thread: it drains the cmr.config reader (state), the cmr.registrations reader
 * (registry), then polls the group consumer for registrations to answer, all that are
 * waiting at once (see "answers in flight"). Answers go to the agent's command topic,
 * created on first use (cmr_admin_ensure_topic) and remembered.
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
    cmr_signer_t *signer;    /* owned: signs every command */
    int64_t lifetime_ms;     /* of every command (trust.command.lifetime.ms) */
    cmr_lag_gauge_t lag;     /* the group consumer's lag per partition, for /metrics */
    struct answer **answers; /* owned: answers queued, waiting for answers_flush() */
    size_t n_answers;
    cmr_record_t **polled; /* owned array: the registrations of one poll, while they are queued */
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

/* --- answers in flight -------------------------------------------------------------- */

/*
 * Answers are queued, not sent one by one: a registration burst (a fleet restarting) or an
 * environment change that re-answers every agent costs one wait for delivery, not one per
 * agent (each wait is a round trip to the cluster, about 10 ms on the embedded broker,
 * which made 100 registrations at once take a second). answers_flush() waits for every
 * queued answer, then, in the order they were queued, counts and logs each one and marks
 * its registration record done once its answer is delivered.
 *
 * Ownership: the batch owns its entries and the records in them. The delivery report (on
 * the producer's thread) writes an entry's outcome; an entry still in flight when the wait
 * times out is abandoned, and then the report frees it (atomic_exchange decides who is
 * last).
 */
enum { ANSWER_IN_FLIGHT, ANSWER_DELIVERED, ANSWER_FAILED, ANSWER_ABANDONED };

#define ANSWERS_MAX 1024      /* queued answers before a flush is forced */
#define ANSWERS_WAIT_MS 30000 /* for the delivery of a batch */

static int answers_flush(worker_t *w);

typedef struct answer {
    _Atomic int outcome; /* ANSWER_*: written by the delivery report, or here when nothing was sent */
    const char *error;   /* librdkafka's static text of a failed delivery */
    int configured;      /* 1: AgentConfiguration; 0: NoEnvironment; -1: nothing sent */
    cmr_record_t *rec;   /* owned: the registration this answers (NULL for a re-answer) */
    cmr_buf_t log;       /* owned: the log line's fields, written once delivered */
    char topic[CMR_TOPIC_NAME_MAX];
} answer_t;

/* The producer's delivery report (its own thread); diagnoses are sent with no opaque. */
static void on_delivery(const cmr_delivery_t *d, void *cb_opaque)
{
    (void)cb_opaque;
    answer_t *a = d->opaque;
    if (!a)
        return;
    a->error = d->error;
    if (atomic_exchange(&a->outcome, d->err ? ANSWER_FAILED : ANSWER_DELIVERED) == ANSWER_ABANDONED) {
        cmr_buf_free(&a->log);
        free(a);
    }
}

static answer_t *answer_new(worker_t *w, cmr_record_t *rec)
{
    if (w->n_answers == ANSWERS_MAX)
        answers_flush(w); /* a failed answer there is logged; this one is queued anyway */
    answer_t *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    atomic_init(&a->outcome, ANSWER_DELIVERED); /* nothing sent (yet) */
    a->configured = -1;
    a->rec = rec;
    w->answers[w->n_answers++] = a;
    return a;
}

/* Queues the answer for one registration (rec: its record, owned from here on, or NULL).
 * 0, or -1 when the answer could not even be queued (the record is then not done). */
static int queue_answer(worker_t *w, const cmr_agent_registration_t *reg, const char *why, cmr_record_t *rec)
{
    char err[256];
    reg_esc_t e;
    escape_reg(reg, &e);
    answer_t *ans = answer_new(w, rec);
    if (!ans) {
        cmr_log(CMR_LOG_ERROR, "config.send_failed", "instance=%s error=\"out of memory\"", e.instance);
        cmr_record_free(rec);
        return -1;
    }
    if (cmr_topic_command(reg->instance_id, ans->topic, sizeof ans->topic) != 0) {
        cmr_log(CMR_LOG_WARN, "config.bad_instance_id", "instance=\"%s\" agent=\"%s\"", e.instance, e.name);
        return 0; /* nothing can ever be sent to it: done */
    }
    if (ensure_command_topic(w, ans->topic) != 0) {
        atomic_store(&ans->outcome, ANSWER_FAILED);
        ans->error = "the command topic could not be made";
        return -1;
    }
    cmr_cfg_answer_t a;
    cmr_cfg_answer(w->state, reg, cmr_wall_ms(), &a);
    if (a.configured) { /* the fleet's trace-context MAC key, derived from the signing key */
        cmr_signer_derive_key(w->signer, CMR_TRACE_CONTEXT_KEY_CONTEXT, a.trace_key);
        a.cfg.trace_context.key = (cmr_bytes_t){a.trace_key, sizeof a.trace_key};
    }
    char reason[sizeof a.reason * 4];
    ans->configured = a.configured;
    if (a.configured)
        cmr_buf_printf(&ans->log,
                       "why=%s agent=\"%s\" host=\"%s\" instance=%s agent_id=%016" PRIx64
                       " environment=%s revision=%" PRId64,
                       why, e.name, e.host, e.instance, (uint64_t)a.cfg.agent_id, a.cfg.environment_id, a.cfg.revision);
    else
        cmr_buf_printf(&ans->log, "agent=\"%s\" host=\"%s\" instance=%s reason=\"%s\"", e.name, e.host, e.instance,
                       cmr_log_escape(a.reason, reason, sizeof reason));
    atomic_store(&ans->outcome, ANSWER_IN_FLIGHT);
    int rc = a.configured ? cmr_command_send(w->producer, w->signer, reg->instance_id, ans->topic, w->lifetime_ms,
                                             CMR_MSG_AGENT_CONFIGURATION, &a.cfg, ans, err, sizeof err)
                          : cmr_command_send(w->producer, w->signer, reg->instance_id, ans->topic, w->lifetime_ms,
                                             CMR_MSG_NO_ENVIRONMENT, &a.no_env, ans, err, sizeof err);
    if (rc != CMR_SEND_OK) {
        atomic_store(&ans->outcome, ANSWER_FAILED); /* never queued: no report will come */
        cmr_log(CMR_LOG_ERROR, "config.send_failed", "topic=%s error=\"%s\"", ans->topic,
                rc == CMR_SEND_QUEUE_FULL ? "queue full" : err);
        ans->error = "not queued";
        return -1;
    }
    return 0;
}

/* A registration record that gets no answer (refused): done in its turn. */
static void queue_no_answer(worker_t *w, cmr_record_t *rec)
{
    if (!answer_new(w, rec))
        cmr_record_free(rec); /* not done: read again by the next owner */
}

/* Waits until every queued answer is delivered or failed, at most ANSWERS_WAIT_MS. */
static void answers_wait(worker_t *w)
{
    int64_t deadline = cmr_mono_ms() + ANSWERS_WAIT_MS;
    for (size_t i = 0; i < w->n_answers;) {
        if (atomic_load(&w->answers[i]->outcome) != ANSWER_IN_FLIGHT) {
            i++;
            continue;
        }
        if (cmr_mono_ms() > deadline)
            return;
        struct timespec ts = {0, 200000}; /* the report comes on the producer's thread */
        nanosleep(&ts, NULL);
    }
}

/* Settles one answer after the wait; frees it unless its report is still to come. */
static void answer_settle(worker_t *w, answer_t *a)
{
    int outcome = atomic_exchange(&a->outcome, ANSWER_ABANDONED);
    if (outcome == ANSWER_DELIVERED && a->configured >= 0) {
        atomic_fetch_add(a->configured ? &w->configured : &w->no_environment, 1);
        if (a->configured)
            cmr_log(CMR_LOG_INFO, "agent.configured", "%s", cmr_buf_str(&a->log));
        else
            cmr_log(CMR_LOG_WARN, "agent.no_environment", "%s", cmr_buf_str(&a->log));
    } else if (outcome == ANSWER_FAILED) {
        cmr_log(CMR_LOG_ERROR, "config.send_failed", "topic=%s error=\"%s\" %s", a->topic,
                a->error ? a->error : "delivery failed", cmr_buf_str(&a->log));
    } else if (outcome == ANSWER_IN_FLIGHT) {
        cmr_log(CMR_LOG_ERROR, "config.delivery_timeout", "topic=%s timeout_ms=%d %s", a->topic, ANSWERS_WAIT_MS,
                cmr_buf_str(&a->log));
    }
    if (a->rec) {
        if (outcome == ANSWER_DELIVERED)
            cmr_consumer_done(w->consumer, a->rec);
        cmr_record_free(a->rec);
        a->rec = NULL;
    }
    if (outcome != ANSWER_IN_FLIGHT) { /* else the delivery report frees it */
        cmr_buf_free(&a->log);
        free(a);
    }
}

/* Waits for every queued answer, then settles them in order. 0, or -1 when an answer
 * failed or timed out (logged; its record is not done). */
static int answers_flush(worker_t *w)
{
    if (!w->n_answers)
        return 0;
    int64_t started = cmr_mono_ms();
    answers_wait(w);
    int64_t waited = cmr_mono_ms() - started;
    size_t failed = 0;
    for (size_t i = 0; i < w->n_answers; i++) {
        int outcome = atomic_load(&w->answers[i]->outcome);
        failed += outcome == ANSWER_FAILED || outcome == ANSWER_IN_FLIGHT;
        answer_settle(w, w->answers[i]);
    }
    if (w->n_answers > 1) /* a burst: how many answers shared one wait */
        cmr_log(CMR_LOG_INFO, "config.answers_delivered", "answers=%zu failed=%zu wait_ms=%" PRId64, w->n_answers,
                failed, waited);
    w->n_answers = 0;
    return failed ? -1 : 0;
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
        if (queue_answer(w, r, "environment_changed", NULL) == 0)
            sent++;
    }
    answers_flush(w);
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
            queue_answer(w, r, "mapping_changed", NULL);
        else if (!same && !now) {
            reg_esc_t e;
            escape_reg(r, &e);
            cmr_log(CMR_LOG_WARN, "agent.unmapped", "agent=\"%s\" host=\"%s\" instance=%s was=%s", e.name, e.host,
                    e.instance, before[i]);
        }
    }
    answers_flush(w);
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

/* Queues the answer to one record of cmr.registrations (owned from here on: it is done
 * once its answer is delivered, or at once when it is refused). */
static void handle_registration(worker_t *w, cmr_record_t *rec)
{
    char what[2048];
    if (rec->msg.type != CMR_MSG_AGENT_REGISTRATION) {
        snprintf(what, sizeof what, "type=%s", cmr_msg_type_name(rec->msg.type));
        reject(w, REJECT_FOREIGN_TYPE, rec->topic, rec->partition, rec->offset, what);
        queue_no_answer(w, rec);
        return;
    }
    const cmr_agent_registration_t *r = &rec->msg.u.registration;
    reg_esc_t e;
    escape_reg(r, &e);
    int problem = registration_problem(r);
    if (problem >= 0) {
        snprintf(what, sizeof what, "agent=\"%s\" host=\"%s\" instance=\"%s\"", e.name, e.host, e.instance);
        reject(w, (reject_reason_t)problem, rec->topic, rec->partition, rec->offset, what);
        queue_no_answer(w, rec); /* done: it is never answered */
        return;
    }
    cmr_log(CMR_LOG_INFO, "agent.registration",
            "agent=\"%s\" host=\"%s\" instance=%s agent_id=%016" PRIx64 " attempt=%d", e.name, e.host, e.instance,
            cmr_agent_id(r->agent_name, r->hostname, r->instance_id), r->attempt);
    queue_answer(w, r, "registration", rec);
}

/* The command topics of the registrations a poll returned, looked up together (one
 * metadata request instead of one per agent: a round trip each, which made a burst of
 * registrations wait for each other). Those that fail are asked for again, and logged, by
 * the answer's own ensure_command_topic(). */
static void learn_topics(worker_t *w, cmr_record_t *const *recs, size_t n)
{
    char(*names)[CMR_TOPIC_NAME_MAX] = calloc(n, sizeof *names);
    const char **topics = calloc(n, sizeof *topics);
    size_t k = 0;
    for (size_t i = 0; names && topics && i < n; i++) {
        const cmr_msg_t *m = &recs[i]->msg;
        if (m->type == CMR_MSG_AGENT_REGISTRATION && registration_problem(&m->u.registration) < 0 &&
            cmr_topic_command(m->u.registration.instance_id, names[k], sizeof names[k]) == 0) {
            topics[k] = names[k];
            k++;
        }
    }
    char err[256];
    if (k > 1)
        cmr_producer_ensure_topics_once(w->producer, &w->topics_ok, w->conf, topics, k, 10000, err, sizeof err);
    free(names);
    free(topics);
}

/* Every registration waiting: their command topics looked up together, their answers
 * queued, one wait for their delivery. 0, or -1 on a fatal consumer error. */
static int answer_waiting(worker_t *w)
{
    cmr_record_t *rec;
    size_t n = 0;
    int got = cmr_consumer_poll(w->consumer, 100, &rec);
    while (got == 1) {
        w->polled[n++] = rec;
        got = n < ANSWERS_MAX ? cmr_consumer_poll(w->consumer, 0, &rec) : 0;
    }
    learn_topics(w, w->polled, n);
    for (size_t i = 0; i < n; i++)
        handle_registration(w, w->polled[i]);
    answers_flush(w);
    return got < 0 ? -1 : 0;
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
    if (!(w->answers = calloc(ANSWERS_MAX, sizeof *w->answers)) ||
        !(w->polled = calloc(ANSWERS_MAX, sizeof *w->polled))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    w->producer = cmr_producer_new(conf, "cmr-config", on_delivery, NULL, err, errlen);
    return w->producer ? 0 : -1;
}

static void teardown(worker_t *w)
{
    if (w->answers)
        answers_flush(w); /* what is queued still goes out; records done before the consumer closes */
    free(w->answers);
    free(w->polled);
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
        if (answer_waiting(&w) != 0)
            goto out;
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
