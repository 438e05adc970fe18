/*
 * agent_control.c - the control thread: the agent's conversation with the CMR.
 *
 * One native thread, attached to the JVM (as a daemon) only once the JVM is live, runs a
 * loop that never blocks an application thread:
 *
 *   - minimum-initialization mode: send AgentRegistration, again with exponential
 *     backoff until the CMR answers on the agent's command topic;
 *   - AgentConfiguration -> full mode; NoEnvironment -> log it, stop trying;
 *   - ship the classes the load hook recorded (ClassLoaded), keeping each one until the
 *     cluster acknowledges it: a failed delivery puts it back in the queue;
 *   - notice when the cluster stops answering (disconnected mode: classes keep being
 *     recorded) and when it is back (they are shipped then);
 *   - verify every record of the command topic (a SignedCommand envelope, signed by a key
 *     of trust.keys, for this instance, fresh, not replayed: cmr/command.h) before
 *     anything else looks at it; refusals are counted, logged rate-limited and reported
 *     in AgentStatus;
 *   - apply Redefine and BytecodeResend commands (agent_commands.c);
 *   - report AgentStatus on state changes and periodically.
 */
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "cmr/command.h"
#include "cmr/log.h"
#include "cmr/wire.h"
#include "probe_rings.h"

#define SHIP_MAX_IN_FLIGHT 2000
#define SILENCE_DISCONNECT_MS 3000
#define SHUTDOWN_PROBE_MS 300  /* a metadata request at shutdown when librdkafka said every broker is down */
#define REFUSAL_STATUS_MS 1000 /* refusals are reported in an AgentStatus within this time */
/* a change of the classes instrumented (the first Redefines after configuration, budget
 * removals, cached classes reverted) is reported at most this often, not only with the
 * next periodic status, which may come after a short-lived JVM has ended */
#define CHANGE_STATUS_MS 2000
/* cache files verified ahead per turn of the loop (60 - 210 us each, measured on a JVM
 * starting on 2 vCPUs): a slice delays the handling of commands by a few milliseconds */
#define PREVERIFY_SLICE 32
#define REFUSAL_LOG_PER_SECOND 5
#define AWAITING_MAX 1024 /* Redefines held while their class is being defined */
/* the probes are timed this long after the configuration, when no Redefine is held (the
 * first wave of Redefines goes first), and again later: a JIT busy with the application's
 * start-up may not have compiled the timing loop yet, so the least figure is kept */
static const int64_t probe_cost_at_ms[] = {1000, 10000, 60000};
#define PROBE_COST_TIMES (int)(sizeof probe_cost_at_ms / sizeof probe_cost_at_ms[0])

typedef struct control {
    cmr_agent_t *a;
    cmr_consumer_t *consumer;
    JNIEnv *env;
    int attempt;
    int64_t next_register_ms, register_backoff_ms;
    int64_t next_setup_ms, setup_backoff_ms;
    /* times in this struct are monotonic (cmr_mono_ms): deadlines and silences only */
    int64_t next_status_ms, next_probe_ms;
    _Atomic int64_t last_ack_ms;      /* last successful delivery */
    _Atomic int64_t first_unacked_ms; /* oldest send not yet acknowledged, 0 when none */
    _Atomic int in_flight;
    _Atomic uint64_t failed;
    bool disconnect_reported;
    int probe_cost_runs;      /* times cmr_probe_measure_cost ran */
    bool refusals_unreported; /* a command was refused since the last AgentStatus */
    int64_t next_refusal_status_ms;
    int64_t reported_instrumented; /* classes_instrumented as of the last report_changes */
    int64_t next_change_status_ms;
    bool preverify_done;  /* the cache's files of the expected environment are verified */
    int64_t preverify_us; /* spent verifying them, in all */
    /* commands that arrived before the JVM was live */
    cmr_record_t *deferred[64];
    int ndeferred;
    /* Redefines whose class is being defined (flush_redefines), in arrival order, each
     * until its class is loaded or awaiting_until[i]; owned (done and freed when applied) */
    cmr_record_t *awaiting[AWAITING_MAX];
    int64_t awaiting_until[AWAITING_MAX];
    int nawaiting;
    int64_t next_await_check_ms;
} control_t;

static control_t control_state;
static pthread_mutex_t wake_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake_cond = PTHREAD_COND_INITIALIZER;

/* --- delivery reports (producer's poll thread) -------------------------------------------- */

static void on_delivery(const cmr_delivery_t *d, void *opaque)
{
    control_t *c = opaque;
    cmr_agent_t *a = c->a;
    if (d->err == 0) {
        c->last_ack_ms = cmr_mono_ms();
        if (!a->connected)
            a->connected = true;
    } else {
        c->failed++;
        a->connected = false;
    }
    uintptr_t tag = (uintptr_t)d->opaque;
    if (tag & 1) { /* an EventBatch of tag >> 1 events */
        if (d->err) {
            cmr_probe_stats_t lost = {.dropped = tag >> 1};
            cmr_probe_rings_count(a->rings, &lost);
        }
    } else if (d->opaque) { /* a ClassLoaded: the entry waits for this answer */
        c->in_flight--;
        cmr_class_cache_delivered(a->classes, d->opaque, d->err == 0);
    }
}

static void control_wake(void)
{
    pthread_mutex_lock(&wake_lock);
    pthread_cond_signal(&wake_cond);
    pthread_mutex_unlock(&wake_lock);
}

static void control_sleep(int ms)
{
    struct timespec ts = cmr_wall_deadline(ms);
    pthread_mutex_lock(&wake_lock);
    pthread_cond_timedwait(&wake_cond, &wake_lock, &ts);
    pthread_mutex_unlock(&wake_lock);
}

/* --- status ----------------------------------------------------------------------------- */

static const char *state_name(cmr_agent_state_t s)
{
    static const char *const names[] = {"MINIMAL", "FULL", "DISCONNECTED", "RECONNECTED", "NO_ENVIRONMENT", "SHUTDOWN"};
    assert((unsigned)s < sizeof names / sizeof names[0]); /* the agent's own states only */
    return (unsigned)s < 6 ? names[s] : "?";
}

/* The verdict counts of commands: accepted, and refused per reason (only the reasons
 * that occurred). out holds CMR_TRUST_VERDICT__COUNT items; returns how many are used. */
static size_t refusal_counts(cmr_agent_t *a, int64_t *accepted, cmr_refusal_count_t *out)
{
    size_t n = 0;
    *accepted = (int64_t)a->trust_counts[CMR_TRUST_OK];
    for (int v = 0; v < CMR_TRUST_VERDICT__COUNT; v++) {
        uint64_t count = a->trust_counts[v];
        if (v == CMR_TRUST_OK || count == 0)
            continue;
        out[n++] = (cmr_refusal_count_t){(char *)cmr_trust_verdict_name((cmr_trust_verdict_t)v), (int64_t)count};
    }
    return n;
}

void cmr_agent_send_status(cmr_agent_t *a, cmr_agent_state_t state)
{
    if (!a->producer)
        return;
    cmr_refusal_count_t refused[CMR_TRUST_VERDICT__COUNT];
    int64_t accepted;
    size_t nrefused = refusal_counts(a, &accepted, refused);
    cmr_class_cache_stats_t cs;
    cmr_class_cache_stats(a->classes, &cs);
    cmr_probe_stats_t ps = {0};
    cmr_probe_rings_stats(a->rings, &ps);
    cmr_producer_stats_t prod;
    cmr_producer_stats(a->producer, &prod);
    cmr_agent_status_t st = {
        .agent_id = a->agent_id,
        .instance_id = a->instance_id,
        .state = state,
        .time_ms = cmr_wall_ms(),
        .events_recorded = (int64_t)ps.recorded,
        .events_dropped = (int64_t)ps.dropped,
        .batches_sent = (int64_t)ps.batches,
        .classes_seen = (int64_t)cs.seen,
        .classes_sent = (int64_t)cs.sent,
        .messages_failed = (int64_t)(prod.failed + prod.queue_full),
        .commands_accepted = accepted,
        .commands_refused = {refused, nrefused},
        .environment_id = a->environment_id,
        .environment_revision = a->revision,
        .classes_instrumented = a->classes_instrumented,
        .redefine_failures = (int64_t)a->redefine_failures,
        .traces_dropped = (int64_t)ps.traces_dropped,
    };
    cmr_diagnosis_run_t runs[CMR_DIAG_MAX_RUNS];
    st.diagnoses.items = runs;
    st.diagnoses.count = a->diags ? cmr_agent_diags_runs(a->diags, runs, CMR_DIAG_MAX_RUNS) : 0;
    char err[256];
    if (cmr_producer_send(a->producer, CMR_MSG_AGENT_STATUS, &st, NULL, NULL, err, sizeof err) != CMR_SEND_OK) {
        char eerr[300];
        cmr_log(CMR_LOG_DEBUG, "agent.status_not_sent", "state=%s error=\"%s\"", state_name(state),
                cmr_log_escape(err, eerr, sizeof eerr));
    }
}

/* --- registration ------------------------------------------------------------------------ */

#define REGISTER_QUIET_MS 3000 /* registration retries before this are logged as info */

static void send_registration(control_t *c)
{
    cmr_agent_t *a = c->a;
    cmr_agent_registration_t r = {
        .instance_id = a->instance_id,
        .agent_name = a->settings.name,
        .hostname = a->hostname,
        .ip_addresses = a->addresses,
        .pid = (int64_t)getpid(),
        .jvm_vendor = a->jvm_vendor,
        .jvm_version = a->jvm_version,
        .agent_version = CMR_AGENT_VERSION,
        .start_time_ms = a->start_time_ms,
        .attempt = ++c->attempt,
    };
    char err[256];
    int rc = cmr_producer_send(a->producer, CMR_MSG_AGENT_REGISTRATION, &r, NULL, NULL, err, sizeof err);
    char ecmr[300];
    /* the first retries are the usual start (the command consumer joining): a warning only
     * once the agent has waited REGISTER_QUIET_MS since it started */
    int64_t waited_ms = cmr_wall_ms() - a->start_time_ms;
    cmr_log(waited_ms < REGISTER_QUIET_MS ? CMR_LOG_INFO : CMR_LOG_WARN, "agent.registering",
            "attempt=%d cmr=\"%s\" next_retry_ms=%lld since_start_ms=%lld%s", c->attempt,
            cmr_log_escape(a->settings.bootstrap, ecmr, sizeof ecmr), (long long)c->register_backoff_ms,
            (long long)waited_ms, rc == CMR_SEND_OK ? "" : " queue=full");
}

/* --- commands ----------------------------------------------------------------------------- */

/* The CMR named the agent's environment (signed): the cache of instrumented classes goes on
 * if it was used for that environment; otherwise the classes it served get their original
 * bytes back (the CMR instruments them for the right environment as for any class) and
 * later loads use the new environment's grants. The environment is recorded for the next
 * run of this agent name. environment_id NULL: no environment at all (the cache is off). */
static void grants_confirm(cmr_agent_t *a, const char *environment_id)
{
    if (!a->grants)
        return;
    char expected[CMR_GRANT_ENV_MAX + 1];
    cmr_grant_store_expected(a->grants, expected, sizeof expected);
    const char *now = environment_id ? environment_id : "";
    if (expected[0] && strcmp(expected, now) != 0) {
        a->grants_on = false;
        a->grants_revert = true;
        char eexp[300], enow[300];
        cmr_log(CMR_LOG_WARN, "agent.cache_environment_changed",
                "used=\"%s\" cmr=\"%s\" action=\"the classes served from the cache get their original bytes back\"",
                cmr_log_escape(expected, eexp, sizeof eexp), cmr_log_escape(now, enow, sizeof enow));
    }
    cmr_grant_store_expect(a->grants, now);
    if (!environment_id) {
        a->grants_on = false;
        return;
    }
    if (strcmp(a->recorded_environment, now) != 0) {
        char err[300], eerr[400];
        if (cmr_grant_store_record_environment(a->grants, a->settings.name, now, err, sizeof err) == 0)
            snprintf(a->recorded_environment, sizeof a->recorded_environment, "%s", now);
        else
            cmr_log(CMR_LOG_WARN, "agent.cache_environment_not_recorded", "error=\"%s\"",
                    cmr_log_escape(err, eerr, sizeof eerr));
    }
    if (!a->grants_revert)
        a->grants_on = true;
}

static void apply_configuration(control_t *c, const cmr_agent_configuration_t *cfg)
{
    cmr_agent_t *a = c->a;
    pthread_mutex_lock(&a->config_lock);
    /* answers to retried registrations repeat the configuration we have */
    bool same = a->mode == CMR_MODE_FULL && a->revision == cfg->revision &&
                strcmp(a->environment_id, cfg->environment_id) == 0 && a->agent_id == cfg->agent_id;
    pthread_mutex_unlock(&a->config_lock);
    if (same)
        return;
    pthread_mutex_lock(&a->config_lock);
    snprintf(a->environment_id, sizeof a->environment_id, "%s", cfg->environment_id);
    a->revision = cfg->revision;
    a->strategy = cfg->strategy;
    pthread_mutex_unlock(&a->config_lock);
    a->agent_id = cfg->agent_id;
    cmr_probe_rings_configure(a->rings, &cfg->strategy);
    cmr_probe_rings_set_agent(a->rings, cfg->agent_id);
    cmr_probe_rings_set_trace_context(a->rings, (int)cfg->trace_context.policy, cfg->trace_context.key.data,
                                      cfg->trace_context.key.len);
    size_t kept = cmr_probe_rings_set_request_headers(a->rings, cfg->request_headers.items, cfg->request_headers.count);
    if (kept != cfg->request_headers.count)
        cmr_log(CMR_LOG_WARN, "agent.request_headers_refused", "named=%zu kept=%zu", cfg->request_headers.count, kept);
    int was = a->mode;
    if (was == CMR_MODE_MINIMAL) {
        if (!a->configured_ns)
            a->configured_ns = cmr_mono_ns();
        a->mode = CMR_MODE_FULL;
    }
    a->connected = true;
    if (a->preload)
        cmr_grant_preload_expect(a->preload, cfg->environment_id);
    grants_confirm(a, cfg->environment_id);
    cmr_class_cache_stats_t cs;
    cmr_class_cache_stats(a->classes, &cs);
    char eid[160], ename[160];
    cmr_log(CMR_LOG_INFO, was == CMR_MODE_MINIMAL ? "agent.configured" : "agent.reconfigured",
            "agent_id=%016" PRIx64 " environment=\"%s\" environment_name=\"%s\" revision=%lld sensors=%zu "
            "classes_waiting=%zu since_start_ms=%lld registrations=%d",
            (uint64_t)cfg->agent_id, cmr_log_escape(cfg->environment_id, eid, sizeof eid),
            cmr_log_escape(cfg->environment_name, ename, sizeof ename), (long long)cfg->revision, cfg->sensors.count,
            cs.pending, (long long)(cmr_wall_ms() - a->start_time_ms), c->attempt);
    cmr_agent_send_status(a, CMR_AGENT_FULL);
    control_wake();
}

static void apply_no_environment(control_t *c, const cmr_no_environment_t *ne)
{
    cmr_agent_t *a = c->a;
    a->mode = CMR_MODE_NO_ENVIRONMENT;
    if (a->preload)
        cmr_grant_preload_expect(a->preload, NULL);
    grants_confirm(a, NULL);
    char ename[300], ehost[300], ereason[600];
    cmr_log(CMR_LOG_ERROR, "agent.no_environment",
            "name=\"%s\" host=\"%s\" reason=\"%s\" action=\"the agent stays idle until the JVM is restarted\"",
            cmr_log_escape(a->settings.name, ename, sizeof ename), cmr_log_escape(a->hostname, ehost, sizeof ehost),
            cmr_log_escape(ne->reason, ereason, sizeof ereason));
    cmr_agent_send_status(a, CMR_AGENT_NO_ENVIRONMENT);
}

static bool ensure_env(control_t *c)
{
    cmr_agent_t *a = c->a;
    if (c->env)
        return true;
    if (!a->live)
        return false;
    JavaVMAttachArgs args = {JNI_VERSION_1_8, "cmr-agent-control", NULL};
    if ((*a->jvm)->AttachCurrentThreadAsDaemon(a->jvm, (void **)&c->env, &args) != JNI_OK) {
        cmr_log(CMR_LOG_ERROR, "agent.attach_failed", "thread=control");
        c->env = NULL;
        return false;
    }
    return true;
}

/* Times the probes (their cost goes with every MetricBatch, for the overhead budget) at
 * probe_cost_at_ms after the configuration, between Redefines; keeps the least figure. */
static void measure_probe_cost(control_t *c)
{
    cmr_agent_t *a = c->a;
    int64_t configured = a->configured_ns;
    if (c->probe_cost_runs >= PROBE_COST_TIMES || !configured || c->nawaiting > 0 ||
        cmr_mono_ns() - configured < probe_cost_at_ms[c->probe_cost_runs] * 1000000 || !ensure_env(c))
        return;
    c->probe_cost_runs++;
    int64_t ps = cmr_probe_measure_cost(c->env), was = a->probe_ps;
    if (ps > 0 && (was <= 0 || ps < was))
        a->probe_ps = ps;
}

/* Returns false when the record must wait (JVM not live yet). */
static bool handle_command(control_t *c, cmr_record_t *rec)
{
    cmr_agent_t *a = c->a;
    cmr_msg_t *m = &rec->msg;
    switch (m->type) {
    case CMR_MSG_AGENT_CONFIGURATION:
        if (strcmp(m->u.agent_configuration.instance_id, a->instance_id) == 0 && a->mode != CMR_MODE_NO_ENVIRONMENT)
            apply_configuration(c, &m->u.agent_configuration);
        return true;
    case CMR_MSG_NO_ENVIRONMENT:
        if (strcmp(m->u.no_environment.instance_id, a->instance_id) == 0 && a->mode == CMR_MODE_MINIMAL)
            apply_no_environment(c, &m->u.no_environment);
        return true;
    case CMR_MSG_REDEFINE:
        if (!ensure_env(c))
            return false;
        cmr_agent_apply_redefine(a, c->env, &m->u.redefine);
        return true;
    case CMR_MSG_BYTECODE_RESEND:
        if (!ensure_env(c))
            return false;
        cmr_agent_apply_resend(a, c->env, &m->u.bytecode_resend);
        return true;
    case CMR_MSG_CLASS_GRANTS: /* memory only: no JVM call, no need to wait for it */
        cmr_agent_take_grants(a, &m->u.class_grants);
        return true;
    default: {
        char etopic[CMR_TOPIC_NAME_MAX + 16];
        cmr_log(CMR_LOG_WARN, "agent.unexpected_message", "type=%s topic=\"%s\" offset=%lld",
                cmr_msg_type_name(m->type), cmr_log_escape(rec->topic, etopic, sizeof etopic), (long long)rec->offset);
        return true;
    }
    }
}

/* Redefine commands waiting together are applied with one RedefineClasses call. */
#define REDEFINE_BATCH 256

/* Redefines that reach the agent while their class is being defined. The agent ships a
 * class's bytes from ClassFileLoadHook, before the JVM has defined it (its superclass may
 * still be loading, and its loader may be slow), so the CMR's answer can come first: such a
 * command is held (at most AWAIT_CLASS_MS, tried again every AWAIT_CHECK_MS) and applied
 * once the class is loaded (cmr_agent_apply_redefines says which wait). A later command for
 * the same class waits behind it, so that commands of one class apply in order. When the
 * class never comes, or the table is full, the command is applied as it is and answers
 * UNKNOWN_CLASS. */
#define AWAIT_CLASS_MS 10000
#define AWAIT_CHECK_MS 20

static bool waits_behind(const control_t *c, const cmr_redefine_t *cmd)
{
    for (int i = 0; i < c->nawaiting; i++)
        if (cmr_agent_same_class(&c->awaiting[i]->msg.u.redefine, cmd))
            return true;
    return false;
}

/* Appends rec (a Redefine, owned from now on) to the held commands; arriving: it is new
 * (its wait is logged). */
static void hold(control_t *c, cmr_record_t *rec, int64_t until, bool arriving)
{
    assert(c->nawaiting < AWAITING_MAX);
    if (arriving) {
        const cmr_redefine_t *cmd = &rec->msg.u.redefine;
        char ename[256];
        cmr_log(CMR_LOG_DEBUG, "agent.redefine_waits", "request=%lld class=\"%s\" loader=%lld",
                (long long)cmd->request_id, cmr_log_escape(cmd->class_name, ename, sizeof ename),
                (long long)cmd->loader_id);
    }
    c->awaiting_until[c->nawaiting] = until;
    c->awaiting[c->nawaiting++] = rec;
}

/* Applies the Redefines of batch[0..*n). A command whose class is being defined and whose
 * wait is not over (until[i]) goes (back) to the held commands, after those held already;
 * the others are done and freed. arriving: the commands are new (their wait is logged). */
static void flush_redefines(control_t *c, cmr_record_t **batch, const int64_t *until, int *n, bool arriving)
{
    if (*n == 0)
        return;
    assert(*n <= REDEFINE_BATCH);
    const cmr_redefine_t *cmds[REDEFINE_BATCH];
    bool waits[REDEFINE_BATCH];
    int64_t now = cmr_mono_ms();
    bool room = c->nawaiting + *n <= AWAITING_MAX;
    for (int i = 0; i < *n; i++) {
        cmds[i] = &batch[i]->msg.u.redefine;
        waits[i] = room && now < until[i];
    }
    cmr_agent_apply_redefines(c->a, c->env, cmds, *n, waits);
    for (int i = 0; i < *n; i++) {
        if (waits[i]) {
            hold(c, batch[i], until[i], arriving);
            continue;
        }
        cmr_consumer_done(c->consumer, batch[i]);
        cmr_record_free(batch[i]);
    }
    *n = 0;
}

/* Tries the held commands again (every AWAIT_CHECK_MS): those whose class is loaded now, or
 * whose wait is over, are applied; the others stay, in order. */
static void release_held(control_t *c)
{
    int64_t now = cmr_mono_ms();
    if (c->nawaiting == 0 || now < c->next_await_check_ms)
        return;
    c->next_await_check_ms = now + AWAIT_CHECK_MS;
    static cmr_record_t *held[AWAITING_MAX]; /* the control thread's alone */
    static int64_t held_until[AWAITING_MAX];
    int nheld = c->nawaiting;
    memcpy(held, c->awaiting, (size_t)nheld * sizeof held[0]);
    memcpy(held_until, c->awaiting_until, (size_t)nheld * sizeof held_until[0]);
    c->nawaiting = 0;
    cmr_record_t *batch[REDEFINE_BATCH];
    int64_t until[REDEFINE_BATCH];
    int nbatch = 0;
    for (int i = 0; i < nheld; i++) {
        if (now < held_until[i] && waits_behind(c, &held[i]->msg.u.redefine)) {
            hold(c, held[i], held_until[i], false); /* behind one a batch before kept waiting */
            continue;
        }
        batch[nbatch] = held[i];
        until[nbatch++] = held_until[i];
        if (nbatch == REDEFINE_BATCH)
            flush_redefines(c, batch, until, &nbatch, false);
    }
    flush_redefines(c, batch, until, &nbatch, false);
}

/* Verifies the envelope of a record from the command topic and puts the command inside
 * in its place (true). A refused record is counted, logged (rate-limited: anyone who can
 * write to the topic can make refusals at will), marked done and freed (false). */
static bool open_command(control_t *c, cmr_record_t *rec)
{
    cmr_agent_t *a = c->a;
    cmr_msg_type_t type = rec->msg.type;
    cmr_trust_verdict_t v = cmr_command_open(a->verifier, &rec->msg, cmr_wall_ms());
    assert((unsigned)v < CMR_TRUST_VERDICT__COUNT);
    a->trust_counts[v]++;
    if (v == CMR_TRUST_OK)
        return true;
    c->refusals_unreported = true;
    static cmr_log_limiter_t limiter;
    unsigned long long suppressed = 0;
    if (cmr_log_allow(&limiter, REFUSAL_LOG_PER_SECOND, &suppressed)) {
        const cmr_signed_command_t *sc = type == CMR_MSG_SIGNED_COMMAND ? &rec->msg.u.signed_command : NULL;
        char etopic[CMR_TOPIC_NAME_MAX + 16], ekey[64], etarget[96];
        cmr_log(CMR_LOG_WARN, "agent.command_refused",
                "verdict=%s topic=\"%s\" partition=%d offset=%lld type=%s key=\"%s\" target=\"%s\" "
                "suppressed=%llu action=\"the command is ignored\"",
                cmr_trust_verdict_name(v), cmr_log_escape(rec->topic, etopic, sizeof etopic), (int)rec->partition,
                (long long)rec->offset, cmr_msg_type_name(type),
                cmr_log_escape(sc && sc->key_id ? sc->key_id : "", ekey, sizeof ekey),
                cmr_log_escape(sc && sc->target_instance ? sc->target_instance : "", etarget, sizeof etarget),
                suppressed);
    }
    cmr_consumer_done(c->consumer, rec);
    cmr_record_free(rec);
    return false;
}

/* Whether the cache has files left to verify ahead (preverify_cache). */
static bool preverify_pending(const control_t *c)
{
    return c->a->grants && c->a->grants_on && !c->preverify_done;
}

/* The cache's grant files verified ahead of their classes' loads, a slice per turn, so
 * that the load hook of a restarted JVM does not check a signature per class
 * (cmr_grant_store_preverify). Again after the expected environment changed. */
static void preverify_cache(control_t *c)
{
    cmr_agent_t *a = c->a;
    if (!a->grants || !a->grants_on)
        return;
    cmr_grant_preverify_t r;
    int64_t t0 = cmr_mono_ns();
    cmr_grant_store_preverify(a->grants, cmr_wall_ms(), PREVERIFY_SLICE, &r);
    c->preverify_us += (cmr_mono_ns() - t0) / 1000;
    if (r.refused)
        cmr_log(CMR_LOG_WARN, "agent.cache_refused_ahead",
                "refused=%zu reason=%s file=\"%s\" consequence=\"dropped from the cache index: those classes are "
                "instrumented by redefinition\"",
                r.refused, cmr_grant_verdict_name(r.first_refusal), r.first_refused_file);
    if (r.left > 0) {
        c->preverify_done = false;
        return;
    }
    cmr_grant_store_stats_t gs;
    cmr_grant_store_stats(a->grants, &gs);
    if (!c->preverify_done && gs.preverified)
        cmr_log(CMR_LOG_INFO, "agent.cache_preverified", "files=%llu took_us=%lld", (unsigned long long)gs.preverified,
                (long long)c->preverify_us);
    c->preverify_done = true;
}

/* A configured, connected agent whose count of instrumented classes changed reports it
 * within CHANGE_STATUS_MS (at most one extra AgentStatus per CHANGE_STATUS_MS). */
static void report_changes(control_t *c, int64_t now)
{
    cmr_agent_t *a = c->a;
    if (a->mode != CMR_MODE_FULL || !a->connected || now < c->next_change_status_ms ||
        a->classes_instrumented == c->reported_instrumented)
        return;
    c->reported_instrumented = a->classes_instrumented;
    c->next_change_status_ms = now + CHANGE_STATUS_MS;
    cmr_agent_send_status(a, CMR_AGENT_FULL);
}

/* Refusals reach cmr.agent-events soon (at most one extra AgentStatus a second), in the
 * agent's current state. */
static void report_refusals(control_t *c, int64_t now)
{
    if (!c->refusals_unreported || now < c->next_refusal_status_ms)
        return;
    c->refusals_unreported = false;
    c->next_refusal_status_ms = now + REFUSAL_STATUS_MS;
    int mode = c->a->mode;
    cmr_agent_send_status(c->a, mode == CMR_MODE_FULL             ? CMR_AGENT_FULL
                                : mode == CMR_MODE_NO_ENVIRONMENT ? CMR_AGENT_NO_ENVIRONMENT
                                                                  : CMR_AGENT_MINIMAL);
}

static void poll_commands(control_t *c, int timeout_ms)
{
    /* deferred commands first, in order, once the JVM is live */
    while (c->ndeferred > 0 && c->a->live) {
        if (!handle_command(c, c->deferred[0]))
            break;
        cmr_consumer_done(c->consumer, c->deferred[0]);
        cmr_record_free(c->deferred[0]);
        memmove(c->deferred, c->deferred + 1, (size_t)--c->ndeferred * sizeof c->deferred[0]);
    }
    if (ensure_env(c))
        release_held(c);
    cmr_record_t *batch[REDEFINE_BATCH];
    int64_t until[REDEFINE_BATCH];
    int nbatch = 0;
    for (int i = 0; i < 1024; i++) {
        if (c->ndeferred == (int)(sizeof c->deferred / sizeof c->deferred[0]))
            break; /* stop reading until the JVM is live */
        cmr_record_t *rec;
        if (cmr_consumer_poll(c->consumer, i == 0 ? timeout_ms : 0, &rec) != 1)
            break;
        if (!open_command(c, rec))
            continue; /* refused: nothing else sees it */
        if (c->ndeferred == 0 && rec->msg.type == CMR_MSG_REDEFINE && ensure_env(c)) {
            int64_t until_ms = cmr_mono_ms() + AWAIT_CLASS_MS;
            if (c->nawaiting < AWAITING_MAX && waits_behind(c, &rec->msg.u.redefine)) {
                hold(c, rec, until_ms, true);
                continue;
            }
            batch[nbatch] = rec;
            until[nbatch++] = until_ms;
            if (nbatch == REDEFINE_BATCH)
                flush_redefines(c, batch, until, &nbatch, true);
            continue;
        }
        flush_redefines(c, batch, until, &nbatch, true); /* keep the order of commands */
        if (c->ndeferred == 0 && handle_command(c, rec)) {
            cmr_consumer_done(c->consumer, rec);
            cmr_record_free(rec);
        } else {
            c->deferred[c->ndeferred++] = rec;
        }
    }
    flush_redefines(c, batch, until, &nbatch, true);
}

/* Fetches the producer's metadata of every topic the agent sends to, on the control
 * thread, before the first message to each: librdkafka otherwise holds the first message
 * to a topic it does not know until its own metadata refresh, which took about 1 s (the
 * first registration, then the first ClassLoaded after configuration). */
static void warm_topics(cmr_agent_t *a)
{
    static const cmr_topic_t topics[] = {CMR_TOPIC_REGISTRATIONS, CMR_TOPIC_CLASSES, CMR_TOPIC_AGENT_EVENTS,
                                         CMR_TOPIC_EVENTS, CMR_TOPIC_METRICS};
    for (size_t i = 0; i < sizeof topics / sizeof topics[0]; i++)
        if (cmr_producer_fetch_metadata(a->producer, cmr_topic_name(topics[i]), 1000) < 0)
            cmr_log(CMR_LOG_WARN, "agent.metadata_failed",
                    "topic=%s action=\"the first message to it waits for the "
                    "producer's own metadata refresh\"",
                    cmr_topic_name(topics[i]));
}

/* The command topic is read by assign(), not through a consumer group: this agent is its
 * only reader, and a group join costs seconds (about 3 s on the embedded broker) before
 * the first command can arrive. Where reading starts, and why nothing is missed:
 *   - the topic is named after the instance id, 128 random bits drawn at this start: every
 *     record on it is for this run of this agent, none is stale;
 *   - the topic is made sure of first, and every partition is assigned from its
 *     beginning (any layout: the constant key puts every command on one partition, which
 *     the agent does not need to know), so a command written before the assignment took
 *     effect (an answer to a registration, a Redefine) is read all the same;
 *   - registration is sent only once the consumer exists, so every answer is written
 *     after the point the consumer reads from;
 *   - nothing is committed: a restarted JVM is a new instance with a new topic, and
 *     within one run librdkafka keeps the position across reconnections and leader
 *     changes (records are handed out once, in order); should retention have removed the
 *     oldest records meanwhile, auto.offset.reset=earliest reads from the oldest left.
 * The producer's metadata of the topics it sends to is fetched here as well (warm_topics). */
static void setup_consumer(control_t *c, int64_t now)
{
    cmr_agent_t *a = c->a;
    char err[512], client[64];
    if (a->stopping)
        return;
    if (cmr_admin_ensure_topic(a->conf, a->cmd_topic, 1, -1, 0, 1500, err, sizeof err) != 0) {
        char eerr[600];
        cmr_log(CMR_LOG_WARN, "agent.cmr_unreachable", "error=\"%s\" retry_ms=%lld",
                cmr_log_escape(err, eerr, sizeof eerr), (long long)c->setup_backoff_ms);
        c->next_setup_ms = now + c->setup_backoff_ms;
        c->setup_backoff_ms = c->setup_backoff_ms * 2 > a->settings.register_backoff_max_ms
                                  ? a->settings.register_backoff_max_ms
                                  : c->setup_backoff_ms * 2;
        return;
    }
    snprintf(client, sizeof client, "cmr-agent-%s", a->instance_id);
    c->consumer = cmr_consumer_new_assigned(a->conf, client, a->cmd_topic, 1500, err, sizeof err);
    if (!c->consumer) {
        char eerr[600];
        cmr_log(CMR_LOG_ERROR, "agent.consumer_failed", "error=\"%s\" retry_ms=%lld",
                cmr_log_escape(err, eerr, sizeof eerr), (long long)c->setup_backoff_ms);
        c->next_setup_ms = now + c->setup_backoff_ms;
        return;
    }
    warm_topics(a);
}

/* --- class shipping ---------------------------------------------------------------------- */

static void ship_classes(control_t *c)
{
    cmr_agent_t *a = c->a;
    char env_id[128];
    int64_t revision;
    pthread_mutex_lock(&a->config_lock);
    snprintf(env_id, sizeof env_id, "%s", a->environment_id);
    revision = a->revision;
    pthread_mutex_unlock(&a->config_lock);
    if (a->grants_revert)
        return; /* the classes served from the cache are restored first */
    while (c->in_flight < SHIP_MAX_IN_FLIGHT && !a->stopping) {
        cmr_class_entry_t *e = cmr_class_cache_take(a->classes);
        if (!e)
            return;
        uint8_t applied[CMR_TRUST_DIGEST_BYTES];
        bool cached =
            (a->grants || a->preload) && cmr_class_cache_applied_of(a->classes, e->name, e->loader_id, applied);
        if (cached) {
            cmr_agent_note_cached(a, e->name, e->loader_id, applied);
            cmr_agent_keep_ahead(a, e->name, e->loader_id);
        }
        cmr_class_loaded_t msg = {
            .agent_id = a->agent_id,
            .instance_id = a->instance_id,
            .environment_id = env_id,
            .revision = revision,
            .class_name = e->name,
            .loader_id = e->loader_id,
            .class_hash = (int64_t)e->hash,
            .cause = e->cause,
            .request_id = e->request_id,
            .bytecode = {e->bytes, e->len},
            .applied_digest = {cached ? applied : NULL, cached ? sizeof applied : 0},
            /* no ClassGrants for an agent that would drop them (agent.preload.max.bytes 0) */
            .agent_features = a->preload ? CMR_AGENT_READS_CLASS_GRANTS : 0,
        };
        char err[256];
        if (c->in_flight == 0)
            c->first_unacked_ms = cmr_mono_ms();
        c->in_flight++;
        int rc = cmr_producer_send(a->producer, CMR_MSG_CLASS_LOADED, &msg, NULL, e, err, sizeof err);
        if (rc != CMR_SEND_OK) {
            c->in_flight--;
            if (rc == CMR_SEND_ERROR) {
                char ename[256], eerr[300];
                cmr_log(CMR_LOG_ERROR, "agent.class_not_sent", "class=\"%s\" error=\"%s\"",
                        cmr_log_escape(e->name, ename, sizeof ename), cmr_log_escape(err, eerr, sizeof eerr));
                cmr_class_cache_drop(a->classes, e);
                continue;
            }
            cmr_class_cache_delivered(a->classes, e, false); /* queue full: back in line */
            return;
        }
    }
}

/* Disconnected when the cluster has not acknowledged anything for a while although we
 * are waiting for answers. Reconnected when a metadata request succeeds again. */
static void check_connection(control_t *c, int64_t now)
{
    cmr_agent_t *a = c->a;
    if (a->connected && c->in_flight > 0 && now - c->last_ack_ms > SILENCE_DISCONNECT_MS &&
        now - c->first_unacked_ms > SILENCE_DISCONNECT_MS)
        a->connected = false;
    if (!a->connected && !c->disconnect_reported && a->mode == CMR_MODE_FULL) {
        cmr_class_cache_stats_t cs;
        cmr_class_cache_stats(a->classes, &cs);
        char ecmr[300];
        cmr_log(CMR_LOG_WARN, "agent.disconnected",
                "cmr=\"%s\" classes_waiting=%zu action=\"recording classes until the CMR is back\"",
                cmr_log_escape(a->settings.bootstrap, ecmr, sizeof ecmr), cs.pending + cs.in_flight);
        c->disconnect_reported = true;
        cmr_agent_send_status(a, CMR_AGENT_DISCONNECTED);
    }
    if (!a->connected && now >= c->next_probe_ms) {
        c->next_probe_ms = now + 1000;
        if (cmr_producer_fetch_metadata(a->producer, NULL, 1000) > 0)
            a->connected = true;
    }
    if (a->connected && c->disconnect_reported) {
        c->disconnect_reported = false;
        c->last_ack_ms = now;
        c->first_unacked_ms = now;
        cmr_class_cache_stats_t cs;
        cmr_class_cache_stats(a->classes, &cs);
        char ecmr[300];
        cmr_log(CMR_LOG_INFO, "agent.reconnected", "cmr=\"%s\" classes_waiting=%zu",
                cmr_log_escape(a->settings.bootstrap, ecmr, sizeof ecmr), cs.pending + cs.in_flight);
        cmr_agent_send_status(a, CMR_AGENT_RECONNECTED);
    }
}

/* --- the loop ----------------------------------------------------------------------------- */

/* Whether waiting for the cluster at shutdown can help. The agent's own view turns
 * disconnected after SILENCE_DISCONNECT_MS of silence while it waits for answers;
 * librdkafka says at once when every broker is down, but also when the first of a host's
 * addresses refused a connection and the next was taken: then a metadata request of
 * SHUTDOWN_PROBE_MS decides (a broker that restarts just then, before librdkafka's
 * reconnect backoff ran out, counts as down: the last messages are lost, as in any outage
 * at exit). Decided once, by the first of the control thread (its loop ended: the
 * publisher's stop or cmr_agent_control_stop) and cmr_agent_control_stop to ask; the other
 * waits for the answer, so both flush and join by the same one. */
static pthread_mutex_t shutdown_lock = PTHREAD_MUTEX_INITIALIZER;
static int shutdown_reachable = -1; /* -1: not decided yet (guarded by shutdown_lock) */

static bool cluster_reachable(cmr_agent_t *a)
{
    pthread_mutex_lock(&shutdown_lock);
    if (shutdown_reachable < 0)
        shutdown_reachable = a->connected && (!a->producer || !cmr_producer_cluster_down(a->producer) ||
                                              cmr_producer_fetch_metadata(a->producer, NULL, SHUTDOWN_PROBE_MS) > 0);
    bool r = shutdown_reachable;
    pthread_mutex_unlock(&shutdown_lock);
    return r;
}

static void *control_main(void *arg)
{
    control_t *c = arg;
    cmr_agent_t *a = c->a;
    pthread_setname_np(pthread_self(), "cmr-control"); /* as the publisher's */
    c->register_backoff_ms = a->settings.register_backoff_ms;
    c->setup_backoff_ms = a->settings.register_backoff_ms > 1000 ? a->settings.register_backoff_ms : 1000;
    c->last_ack_ms = cmr_mono_ms();
    cmr_agent_send_status(a, CMR_AGENT_MINIMAL);
    while (!a->stopping) {
        int64_t now = cmr_mono_ms();
        if (!c->consumer && now >= c->next_setup_ms)
            setup_consumer(c, now);
        if (a->mode == CMR_MODE_MINIMAL && c->consumer && now >= c->next_register_ms) {
            send_registration(c);
            c->next_register_ms = now + c->register_backoff_ms;
            c->register_backoff_ms = c->register_backoff_ms * 2 > a->settings.register_backoff_max_ms
                                         ? a->settings.register_backoff_max_ms
                                         : c->register_backoff_ms * 2;
        }
        if (c->consumer) {
            poll_commands(c, preverify_pending(c) ? 0 : 20); /* slices back to back */
            report_refusals(c, now);
        }
        if (a->grants_revert && ensure_env(c)) {
            cmr_agent_revert_cached(a, c->env);
            a->grants_revert = false;
            if (a->mode == CMR_MODE_FULL)
                a->grants_on = true; /* for the environment the CMR named */
        }
        if (a->mode == CMR_MODE_FULL) {
            check_connection(c, now);
            if (a->connected) {
                ship_classes(c);
                if (ensure_env(c))
                    cmr_agent_capture_byteless(a, c->env);
            }
        }
        /* diagnoses end by themselves, the CMR reachable or not (docs/DIAGNOSIS.md); every
         * start and end is reported at once */
        if (a->mode == CMR_MODE_FULL && ensure_env(c))
            cmr_agent_end_due_diagnoses(a, c->env);
        if (a->mode == CMR_MODE_FULL)
            measure_probe_cost(c);
        cmr_agent_trim_ahead(a, now);
        preverify_cache(c);
        report_changes(c, now);
        if (cmr_agent_diags_take_changed(a->diags) && a->mode == CMR_MODE_FULL)
            cmr_agent_send_status(a, a->connected ? CMR_AGENT_FULL : CMR_AGENT_DISCONNECTED);
        /* periodic status while configured (agent.status.interval.ms; 0: only changes) */
        if (a->settings.status_interval_ms > 0 && now >= c->next_status_ms) {
            if (c->next_status_ms && a->mode == CMR_MODE_FULL && a->connected)
                cmr_agent_send_status(a, CMR_AGENT_FULL);
            c->next_status_ms = now + a->settings.status_interval_ms;
        }
        if (!c->consumer)
            control_sleep(100);
    }
    /* shutdown: ship what can still go, wait for the cluster's answers so that the final
     * counters include every delivery failure, say goodbye (flushed by the caller) */
    bool reachable = cluster_reachable(a);
    if (a->mode == CMR_MODE_FULL && reachable)
        ship_classes(c);
    if (a->producer)
        cmr_producer_flush(a->producer, (int)(reachable ? a->settings.shutdown_flush_ms : 200));
    cmr_agent_send_status(a, CMR_AGENT_SHUTDOWN);
    for (int i = 0; i < c->ndeferred; i++)
        cmr_record_free(c->deferred[i]);
    c->ndeferred = 0;
    for (int i = 0; i < c->nawaiting; i++)
        cmr_record_free(c->awaiting[i]);
    c->nawaiting = 0;
    if (c->consumer)
        cmr_consumer_close(c->consumer);
    c->consumer = NULL;
    if (c->env)
        (*a->jvm)->DetachCurrentThread(a->jvm);
    return NULL;
}

int cmr_agent_control_start(cmr_agent_t *a)
{
    control_t *c = &control_state;
    memset(c, 0, sizeof *c);
    shutdown_reachable = -1;
    c->a = a;
    char err[512];
    /* Agent defaults: deliveries fail within 10 s so that classes go back in the queue,
     * and librdkafka's own buffer stays small; each can be overridden with kafka.*. */
    static const char *const defaults[][2] = {
        {"kafka.message.timeout.ms", "10000"},
        {"kafka.queue.buffering.max.kbytes", "65536"},
        {"kafka.queue.buffering.max.messages", "100000"},
        {"kafka.reconnect.backoff.max.ms", "2000"},
        {"kafka.socket.connection.setup.timeout.ms", "5000"},
    };
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
        if (!cmr_conf_get(a->conf, defaults[i][0], NULL))
            cmr_conf_set(a->conf, defaults[i][0], defaults[i][1], "agent default");
    char client_id[80];
    snprintf(client_id, sizeof client_id, "cmr-agent-%s", a->instance_id);
    a->producer = cmr_producer_new(a->conf, client_id, on_delivery, c, err, sizeof err);
    if (!a->producer) {
        char eerr[600];
        cmr_log(CMR_LOG_ERROR, "agent.producer_failed", "error=\"%s\"", cmr_log_escape(err, eerr, sizeof eerr));
        return -1;
    }
    if (pthread_create(&a->control_thread, NULL, control_main, c) != 0) {
        cmr_producer_destroy(a->producer, 0);
        a->producer = NULL;
        return -1;
    }
    a->control_started = true;
    return 0;
}

void cmr_agent_control_stop(cmr_agent_t *a)
{
    if (!a->control_started)
        return;
    a->stopping = true;
    control_wake();
    /* A cluster that does not answer gets half a second, not the whole flush time. */
    int64_t flush_ms = a->settings.shutdown_flush_ms;
    if (!cluster_reachable(a) && flush_ms > 500)
        flush_ms = 500;
    struct timespec deadline = cmr_wall_deadline(flush_ms);
    if (pthread_timedjoin_np(a->control_thread, NULL, &deadline) != 0) {
        /* still inside a network call: the process is ending, leave it be */
        cmr_log(CMR_LOG_WARN, "agent.shutdown_incomplete", "waited_ms=%lld", (long long)flush_ms);
        return;
    }
    a->control_started = false;
    cmr_producer_destroy(a->producer, (int)flush_ms);
    a->producer = NULL;
}
