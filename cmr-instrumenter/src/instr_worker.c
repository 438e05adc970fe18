/*
 * instr_worker.c - the instrumenter worker loop (see instr_worker.h).
 *
 * One thread, and a pool for the pure part of a unit's new classes ("prepared side by
 * side" below: instrumenting, digests, grants; sent in order from this thread). Records
 * are processed in units (what the consumer has ready, up to 1,024; or one environment
 * run): decisions and cache writes go to the cache's pending batch (which later reads of
 * the unit see) and commands to the producer; then the producer is flushed (every command
 * delivered), the batch committed, and only then the records are marked done, in order. A
 * failure before that point rolls the batch back and processes the record again; a crash
 * replays it (every write is keyed, every answer recomputed).
 *
 * Catch-up of newly assigned partitions. Another worker answered the records of a
 * partition up to the group's committed offset; this worker's cache must know those
 * classes (configuration changes and type resolution use them) before it processes the
 * partition's new records. So, without waiting in the rebalance callback:
 *   - on_rebalance() only records the change: a new partition is paused (no record of it
 *     is handed out) and waits; a revoked one is forgotten, also mid-catch-up;
 *   - the loop (catch_up_run(), between polls) starts a round for the waiting partitions:
 *     their committed offsets, then a range reader (reader.h) over [the cache's last
 *     offset + 1, committed) of each; partitions with nothing to read are taken over;
 *   - each loop turn feeds one bounded step (256 records or 200 ms) into the cache,
 *     sending nothing, and commits it; records of partitions revoked meanwhile are
 *     dropped. A partition whose range is done is taken over: owned (environment runs
 *     include it), its pending environments run, and resumed. A round that fails or runs
 *     past 120 s is given up and its partitions are taken over as they are;
 *   - configuration changes wait while a catch-up is waiting or running (catch_up_busy()),
 *     then run against every owned partition, the one just taken over included.
 *
 * Lost class records. cmr.classes is a delete-policy topic: its offsets are contiguous, so
 * a record whose offset is past the one after the cache's last offset of that partition
 * means records this worker never read (deleted by retention before it got to them, or by
 * a broker that keeps less). Their classes are unknown here, so configuration changes
 * could not reach them: the gap is logged and counted (instr.classes_lost), and every
 * agent of that partition, those cached now, those whose records arrive later and those
 * registered (cmr.registrations, read whole: an agent whose every record was lost is known
 * only there) whose key falls in it, is asked once for all its classes (a BytecodeResend
 * without a class name). When it is asked again after a later gap is instr_resync.h's
 * policy (bounded, backing off; an ask that is only too soon is made when it is due, by
 * resync_step, since the records of the resend itself may be among the lost ones). A record
 * the consumer skipped as malformed counts as lost too: its classes are equally unknown.
 *
 * Trust (docs/SECURITY.md): a ClassLoaded whose bytes do not hash to its class_hash is
 * refused before anything is cached or recorded from it (instr.hash_mismatch, counted).
 * Every command is signed for the agent's instance (cmr_command_send, the key of
 * trust.signing_key, without which the worker does not start), and every Redefine carries
 * the BLAKE2b-256 digest of the original bytes it was made from (original_digest), so the
 * agent applies it only to a class whose original bytes are those.
 *
 * Ownership: the worker owns the cache, the configuration state, the Kafka handles, the
 * signer, the catch-up's reader and ranges and the metadata loaded during one decision
 * (freed after it).
 */
#include "cmr/instr_worker.h"

#include <assert.h>
#include <sched.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "cmr/reader.h"
#include "cmr/buf.h"
#include "cmr/cfg_state.h"
#include "cmr/clock.h"
#include "cmr/command.h"
#include "cmr/diagnoses.h"
#include "cmr/grant.h"
#include "cmr/ids.h"
#include "cmr/instr_budget.h"
#include "cmr/instr_ahead.h"
#include "cmr/instr_cache.h"
#include "cmr/instr_diagnose.h"
#include "cmr/instr_prepare.h"
#include "cmr/instr_probe.h"
#include "cmr/instr_resync.h"
#include "cmr/instr_rules.h"
#include "cmr/kafka.h"
#include "cmr/log.h"
#include "cmr/map.h"
#include "cmr/metrics_http.h"
#include "cmr/rejects.h"
#include "cmr/trust.h"
#include "cmr/workpool.h"

#define MAX_PARTITIONS 1024

/* Catch-up of newly assigned partitions (see the top comment). */
#define CATCH_UP_TIMEOUT_MS 120000 /* a round that takes longer is given up */
#define CATCH_UP_STEP 256          /* records per step, then the cache is committed */
#define CATCH_UP_STEP_MS 200       /* and at most this long */

enum { CATCH_UP_NONE, CATCH_UP_WAITING, CATCH_UP_RUNNING };

typedef struct catch_up_range {
    cmr_reader_range_t range;
    int64_t records; /* fed into the cache */
    bool dropped;    /* revoked during the round */
    bool taken;      /* done and taken over during the round */
} catch_up_range_t;

typedef struct catch_up {
    unsigned char state[MAX_PARTITIONS]; /* CATCH_UP_* of each partition */
    cmr_reader_t *reader;                /* the round in progress (owned), or NULL */
    catch_up_range_t *ranges;            /* its ranges (owned), n of them */
    size_t n;
    int64_t deadline_ms;
} catch_up_t;

/* The overhead budget's state: cmr.metrics read from the end, a window per JVM whose
 * classes this worker owns, and per environment the methods removed in its current
 * revision. The removals are a projection of cmr.budget: each one this worker decides is
 * written there, and every worker reads the topic from its beginning (at start, before it
 * answers a class, and then as it runs), so a restarted worker keeps them and the JVMs of an
 * environment get them whichever worker owns their classes (docs/ARCHITECTURE.md). */
typedef struct budget_env {
    char env_id[128];
    int64_t revision; /* of the environment, the removals' (a newer one starts without) */
    cmr_u64map_t set; /* the removed method ids (values unused) */
    uint64_t *ids;    /* the same ids, owned; sorted when `sorted` (budget_env_ids) */
    size_t n, cap;
    bool sorted;
    bool run_again; /* gained removals from cmr.budget: its JVMs get them (budget_rerun) */
} budget_env_t;

/* At most this many removals per environment are held (more on cmr.budget are refused and
 * counted): a bound on what a writer of the topic can make a worker keep. */
#define BUDGET_MAX_REMOVED (1u << 18)

typedef struct budget {
    double pct, probe_ns;
    int64_t intervals;
    cmr_reader_t *reader;          /* cmr.metrics from the end; NULL: off */
    cmr_reader_t *removals_reader; /* cmr.budget from the beginning (on the readers' client) */
    cmr_u64map_t windows;          /* agent id -> cmr_budget_window_t * (owned) */
    budget_env_t *envs;            /* owned */
    size_t n_envs, cap_envs;
    _Atomic uint64_t removed;  /* methods this worker removed, for /metrics */
    _Atomic uint64_t restored; /* removals read from cmr.budget and applied */
    _Atomic uint64_t refused;  /* records of cmr.budget refused (bad, or past the bound) */
    int64_t swept_ms;          /* windows of JVMs gone quiet were last freed then */
    cmr_log_limiter_t refused_log;
} budget_t;

typedef struct worker {
    const cmr_conf_t *conf;
    cmr_conf_t *pconf; /* producer configuration (low linger by default) */
    cmr_instr_cache_t *cache;
    cmr_cfg_state_t *state;
    cmr_reader_client_t *readers; /* owned: the handle of the config, diagnoses, registrations and budget readers */
    cmr_reader_t *config_reader;
    cmr_reader_t *diag_reader; /* cmr.diagnoses from the beginning */
    cmr_instr_diag_t *diag;    /* diagnoses, the trees still to make, the overlays */
    bool diag_settled;         /* environments of recent diagnoses run once after a start */
    char settled[256][sizeof(((cmr_instr_agent_rec_t *)0)->env_id) + 1]; /* (ids longer are cut: run again) */
    size_t nsettled;
    cmr_consumer_t *consumer;
    cmr_producer_t *producer;
    unsigned char owned[MAX_PARTITIONS];
    int assigned_once;
    int envs_checked;
    size_t sent;               /* messages queued in the current unit */
    cmr_topic_set_t topics_ok; /* command topics known to exist */
    /* Counters: atomic, the /metrics thread reads them while the worker runs. */
    _Atomic uint64_t classes, redefines, resends, originals;
    _Atomic uint64_t hash_mismatch;   /* ClassLoaded refused: bytes do not hash to class_hash */
    _Atomic uint64_t trivial;         /* methods left out as trivial (accessors, tiny leaves), per decision */
    cmr_log_limiter_t mismatch_limit; /* of their log lines */
    cmr_signer_t *signer;             /* owned: signs every command */
    int64_t lifetime_ms;              /* of every command (trust.command.lifetime.ms) */
    int64_t grant_lifetime_ms;        /* of class grants (trust.grant.lifetime.ms); 0: none sent */
    _Atomic uint64_t cached_at_agent; /* Redefines not sent: the agent runs those bytes from its cache */
    cmr_instr_ahead_t *ahead;         /* owned: grants kept to send ahead to new JVMs; NULL: off */
    cmr_verifier_t *own_key;          /* owned: the signer's public key, to check a grant before renewing it */
    _Atomic uint64_t ahead_renewed;   /* grants renewed before they were sent ahead */
    int64_t ahead_jvm_bytes;          /* sent ahead to one JVM at most (instrumenter.ahead.max_bytes_per_jvm) */
    cmr_reader_t *grants_reader;      /* cmr.grants from the beginning (on readers): every worker's grants */
    _Atomic uint64_t ahead_published, ahead_read, ahead_refused; /* records of cmr.grants */
    cmr_log_limiter_t ahead_refused_log;
    _Atomic uint64_t ahead_sets, ahead_classes; /* JVMs sent classes ahead, and those classes */
    _Atomic uint64_t ahead_unread;              /* new JVMs whose agent does not read ClassGrants */
    int replaying;                              /* catch-up of a newly assigned partition: cache only, no commands */
    catch_up_t catch_up;
    cmr_lag_gauge_t lag; /* the group consumer's lag per partition, for /metrics */
    budget_t budget;     /* the overhead budget (instr_budget.h) */
    /* Lost records of cmr.classes ("Lost class records" above): when the last gap of each
     * partition was found, when each agent was last asked for all its classes, and how
     * many records were lost in all. */
    int64_t lost_at_ms[MAX_PARTITIONS];
    int64_t resync_due_ms[MAX_PARTITIONS]; /* asks deferred by the wait: when to ask (0: none) */
    cmr_u64map_t resynced;                 /* agent id -> last ask (ask_resync) */
    cmr_reader_t *registry_reader;         /* cmr.registrations from the beginning (on readers) */
    cmr_u64map_t registered;               /* agent id -> its instance id (owned strings) */
    int32_t classes_partitions;            /* of cmr.classes, to find a registered agent's partition */
    _Atomic uint64_t records_lost, resyncs;
    /* A unit's new classes, prepared side by side ("prepared side by side" below). */
    cmr_workpool_t *pool;   /* owned: instrumenter.threads - 1 helpers */
    struct class_job *jobs; /* owned: JOBS_MAX of them, njobs queued */
    size_t njobs;
    bool emitting;                         /* jobs_flush() is sending: send_msg() must not flush again */
    _Atomic uint64_t prepare_us, prepared; /* worker's time preparing or waiting for it; classes prepared */
} worker_t;

static int jobs_flush(worker_t *w);

/* Metadata loaded while deciding one class (lookup results must outlive the decision). */
typedef struct lookup_ctx {
    worker_t *w;
    uint64_t agent;
    cmr_instr_meta_t **loaded;
    size_t n, cap;
} lookup_ctx_t;

/* How far back a starting worker looks for ended diagnoses whose probes may be left: the
 * longest time to live (7 days) and a day more. */
#define CMR_DIAG_SETTLE_MS (8LL * 24 * 3600 * 1000)

static int64_t mono_ms(void)
{
    return cmr_mono_ms();
}

/* --- lookup of supertypes ------------------------------------------------------------- */

static const cmr_instr_meta_t *lookup_type(const char *type, void *ud)
{
    lookup_ctx_t *x = ud;
    for (size_t i = 0; i < x->n; i++)
        if (strcmp(x->loaded[i]->name, type) == 0)
            return x->loaded[i];
    uint64_t hash;
    if (cmr_instr_cache_type(x->w->cache, x->agent, type, &hash) != 1)
        return NULL;
    cmr_instr_meta_t *m = calloc(1, sizeof *m);
    if (!m || cmr_instr_cache_meta(x->w->cache, hash, m) != 1) {
        free(m);
        return NULL;
    }
    if (CMR_ARRAY_GROW(x->loaded, x->cap, x->n + 1) != 0) {
        cmr_instr_meta_free(m);
        free(m);
        return NULL;
    }
    x->loaded[x->n++] = m;
    return m;
}

static void lookup_done(lookup_ctx_t *x)
{
    for (size_t i = 0; i < x->n; i++) {
        cmr_instr_meta_free(x->loaded[i]);
        free(x->loaded[i]);
    }
    free(x->loaded);
    x->loaded = NULL;
    x->n = x->cap = 0;
}

/* The methods the overhead budget removed in environment env_id, or NULL. */
static budget_env_t *budget_env(worker_t *w, const char *env_id)
{
    for (size_t i = 0; i < w->budget.n_envs; i++)
        if (strcmp(w->budget.envs[i].env_id, env_id) == 0)
            return &w->budget.envs[i];
    return NULL;
}

/* be's removed ids, sorted ascending (as cmr_instr_decision_drop and the choice want). */
static const uint64_t *budget_env_ids(budget_env_t *be)
{
    if (!be->sorted) {
        qsort(be->ids, be->n, sizeof *be->ids, cmr_u64_cmp);
        be->sorted = true;
    }
    return be->ids;
}

/* Decides for one class of one agent and records the types it waits for. */
static int decide(worker_t *w, uint64_t agent, int64_t loader, const char *name, const cmr_instr_meta_t *meta,
                  const cmr_environment_t *env, cmr_instr_decision_t *d)
{
    lookup_ctx_t x = {w, agent, NULL, 0, 0};
    int rc = cmr_instr_decide(env, meta, lookup_type, &x, d);
    lookup_done(&x);
    budget_env_t *be = rc == 0 && env ? budget_env(w, env->id) : NULL;
    if (be && be->n > 0) /* the overhead budget took these out */
        cmr_instr_decision_drop(meta, d, budget_env_ids(be), be->n);
    if (rc == 0 && d->n_trivial > 0) {
        size_t kinds[CF_TRIVIAL_LEAF + 1] = {0};
        for (size_t i = 0; i < d->n_trivial; i++)
            kinds[meta->methods[d->trivial[i]].trivial <= CF_TRIVIAL_LEAF ? meta->methods[d->trivial[i]].trivial : 0]++;
        w->trivial += d->n_trivial;
        cmr_log(CMR_LOG_DEBUG, "instr.trivial_skipped",
                "class=%s agent=%016" PRIx64 " methods=%zu getters=%zu setters=%zu leaves=%zu instrumented=%zu", name,
                agent, d->n_trivial, kinds[CF_TRIVIAL_GETTER], kinds[CF_TRIVIAL_SETTER], kinds[CF_TRIVIAL_LEAF],
                d->n_picks);
    }
    for (size_t i = 0; rc == 0 && i < d->missing.count; i++)
        cmr_instr_cache_put_waiting(w->cache, agent, d->missing.items[i], loader, name);
    return rc;
}

/* --- sending ------------------------------------------------------------------------ */

/* Fetches the producer's metadata of a new command topic now: the first command to an
 * agent does not wait for the producer's own (backed-off) metadata refresh. */
static void warm_topic(worker_t *w, const char *topic)
{
    cmr_producer_fetch_metadata(w->producer, topic, 5000);
}

static int command_topic(worker_t *w, const char *instance_id, char *topic, size_t len)
{
    if (cmr_topic_command(instance_id, topic, len) != 0) {
        cmr_log(CMR_LOG_WARN, "instr.bad_instance_id", "instance=\"%s\"", instance_id);
        return -1;
    }
    if (w->replaying)
        return 0;
    char err[256];
    /* a new topic's metadata is fetched now, not at the producer's next refresh */
    if (cmr_producer_ensure_topic_once(w->producer, &w->topics_ok, w->conf, topic, 10000, err, sizeof err) < 0) {
        cmr_log(CMR_LOG_ERROR, "instr.command_topic_failed", "topic=%s error=\"%s\"", topic, err);
        return -1;
    }
    return 0;
}

/* Queues one message: a command (for agent instance `instance`, on its command topic) is
 * signed and sent in its envelope; anything else (MethodEntry, instance NULL) as it is. */
static int send_msg(worker_t *w, cmr_msg_type_t type, const void *msg, const char *instance, const char *topic)
{
    if (w->replaying)
        return 0;                                       /* the previous owner answered these records */
    if (w->njobs && !w->emitting && jobs_flush(w) != 0) /* what was queued before goes first */
        return -1;
    char err[256];
    assert(!cmr_command_type(type) || (instance && topic));
    int rc = cmr_command_type(type) ? cmr_command_send(w->producer, w->signer, instance, topic, w->lifetime_ms, type,
                                                       msg, NULL, err, sizeof err)
                                    : cmr_producer_send(w->producer, type, msg, topic, NULL, err, sizeof err);
    if (rc != CMR_SEND_OK) {
        cmr_log(CMR_LOG_ERROR, "instr.send_failed", "type=%s error=\"%s\"", cmr_msg_type_name(type),
                rc == CMR_SEND_QUEUE_FULL ? "local queue full" : err);
        return -1;
    }
    w->sent++;
    return 0;
}

static int64_t request_id(uint64_t agent, int64_t loader, const char *name, uint64_t hash, uint64_t sig, int kind)
{
    /* the whole text, whatever the length of the class name (an id is never cut) */
    cmr_buf_t b = {0};
    cmr_buf_printf(&b, "%016" PRIx64 "/%" PRId64 "/%s/%016" PRIx64 "/%016" PRIx64 "/%d", agent, loader, name, hash, sig,
                   kind);
    uint64_t h = cmr_buf_ok(&b) ? XXH3_64bits(b.data, b.len) : 0;
    cmr_buf_free(&b);
    return (int64_t)(h & INT64_MAX);
}

/* --- lost class records ("Lost class records" above) ------------------------------------ */

/* Asks one agent of a partition with lost records for all its classes when
 * cmr_resync_decide says so; an ask that is only too soon is remembered as due for the
 * partition (resync_step). Sends nothing while replaying. w->resynced keeps each agent's
 * mark (instr_resync.h). */
static int ask_resync(worker_t *w, uint64_t agent, const char *instance, int32_t partition)
{
    if (w->replaying || partition < 0 || partition >= MAX_PARTITIONS || w->lost_at_ms[partition] == 0)
        return 0;
    uint64_t mark = (uint64_t)(uintptr_t)cmr_u64map_get(&w->resynced, agent);
    int64_t now = mono_ms(), due = 0;
    switch (cmr_resync_decide(mark, w->lost_at_ms[partition], now, &due)) {
    case CMR_RESYNC_SKIP: return 0;
    case CMR_RESYNC_LATER:
        if (!w->resync_due_ms[partition] || due < w->resync_due_ms[partition])
            w->resync_due_ms[partition] = due;
        return 0;
    case CMR_RESYNC_ASK: break;
    }
    char topic[CMR_TOPIC_NAME_MAX];
    if (command_topic(w, instance, topic, sizeof topic) != 0)
        return 0;
    cmr_bytecode_resend_t r = {request_id(agent, 0, "", 0, (uint64_t)now, 5), (int64_t)agent, "", 0, 0};
    if (send_msg(w, CMR_MSG_BYTECODE_RESEND, &r, instance, topic) != 0)
        return -1;
    mark = cmr_resync_asked(mark, now);
    cmr_u64map_put(&w->resynced, agent, (void *)(uintptr_t)mark);
    w->resyncs++;
    cmr_log(CMR_LOG_INFO, "instr.classes_asked_again", "agent=%016" PRIx64 " partition=%d asks_in_window=%u", agent,
            partition, cmr_resync_asks(mark));
    return 0;
}

typedef struct resync_ctx {
    worker_t *w;
    int32_t partition;
} resync_ctx_t;

static int resync_agent(uint64_t agent, const cmr_instr_agent_rec_t *r, void *ud)
{
    resync_ctx_t *x = ud;
    if (r->partition == x->partition)
        ask_resync(x->w, agent, r->instance_id, x->partition);
    return 0;
}

/* The partition of cmr.classes an agent's ClassLoaded records go to (their key is the
 * agent id, topics.c; the producers' partitioner, as kafka.partitioner says). -1 unknown. */
static int32_t classes_partition(const worker_t *w, uint64_t agent)
{
    char key[17];
    snprintf(key, sizeof key, "%016" PRIx64, agent);
    if (w->classes_partitions <= 0)
        return -1;
    return cmr_key_partition(cmr_conf_get(w->conf, "kafka.partitioner", NULL), key, 16, w->classes_partitions);
}

/* Asks the registered agents whose records go to partition (those cached were asked
 * already: ask_resync asks each once per gap). */
static void resync_registered(worker_t *w, int32_t partition)
{
    size_t it = 0;
    uint64_t agent;
    void *instance;
    while (cmr_u64map_next(&w->registered, &it, &agent, &instance))
        if (classes_partition(w, agent) == partition)
            ask_resync(w, agent, instance, partition);
}

/* Asks the agents of each partition whose asks were deferred (ask_resync) once the wait
 * is over; one still too soon is deferred again. */
static void resync_step(worker_t *w)
{
    int64_t now = mono_ms();
    for (int32_t p = 0; p < MAX_PARTITIONS; p++) {
        if (!w->resync_due_ms[p] || now < w->resync_due_ms[p])
            continue;
        w->resync_due_ms[p] = 0;
        resync_ctx_t x = {w, p};
        cmr_instr_cache_each_agent(w->cache, resync_agent, &x);
        resync_registered(w, p);
    }
}

/* Registrations: who may have class records, by agent id (the first poll waits up to
 * timeout_ms). A bounded table: beyond REGISTERED_MAX agents, new ones are not kept (said
 * in the log once). An agent whose registration is read within REGISTERED_LATE_MS after a
 * gap of its partition was found is asked then (the registration may come in after the
 * records that revealed the gap). */
#define REGISTERED_MAX 200000
#define REGISTERED_LATE_MS 60000 /* a registration read this long after a gap still counts */

static void drain_registrations(worker_t *w, int max, int timeout_ms)
{
    cmr_reader_rec_t rec;
    for (int i = 0; w->registry_reader && i < max && cmr_reader_poll(w->registry_reader, timeout_ms, &rec) == 1;
         i++, timeout_ms = 0) {
        cmr_msg_t m;
        char err[256];
        if (cmr_msg_decode(rec.payload, rec.len, &m, err, sizeof err) != CMR_WIRE_OK)
            continue; /* cmr-config rejects and counts these */
        if (m.type == CMR_MSG_AGENT_REGISTRATION && m.u.registration.instance_id && m.u.registration.instance_id[0]) {
            const cmr_agent_registration_t *r = &m.u.registration;
            uint64_t id = cmr_agent_id(r->agent_name, r->hostname, r->instance_id);
            char *old = cmr_u64map_get(&w->registered, id);
            if (!old && cmr_u64map_count(&w->registered) >= REGISTERED_MAX) {
                static bool told;
                if (!told)
                    cmr_log(CMR_LOG_WARN, "instr.registrations_full", "kept=%d", REGISTERED_MAX);
                told = true;
            } else if (!old) {
                char *copy = strdup(r->instance_id);
                if (copy && cmr_u64map_put(&w->registered, id, copy) != 0) {
                    free(copy);
                    copy = NULL;
                }
                /* registered just after a gap of its partition was found: its records may
                 * be among the lost ones (an agent registers before it sends classes) */
                int32_t part = copy ? classes_partition(w, id) : -1;
                if (part >= 0 && part < MAX_PARTITIONS && w->lost_at_ms[part] &&
                    mono_ms() - w->lost_at_ms[part] < REGISTERED_LATE_MS)
                    ask_resync(w, id, copy, part);
            }
        }
        cmr_msg_free(&m);
    }
}

static void registered_free(worker_t *w)
{
    size_t it = 0;
    uint64_t agent;
    void *instance;
    while (cmr_u64map_next(&w->registered, &it, &agent, &instance))
        free(instance);
    cmr_u64map_free(&w->registered);
}

/* The cache saw `offset` of `partition` (the offset is recorded). Records between the
 * previous one it saw and this one were lost: counted, logged, and the partition's
 * agents asked for their classes (those cached now; the others when their records come). */
static void see_offset(worker_t *w, int32_t partition, int64_t offset)
{
    int64_t seen;
    cmr_instr_cache_put_offset(w->cache, partition, offset, &seen);
    if (offset > seen + 1 && partition >= 0 && partition < MAX_PARTITIONS) {
        w->records_lost += (uint64_t)(offset - (seen + 1));
        w->lost_at_ms[partition] = mono_ms();
        cmr_log(CMR_LOG_WARN, "instr.classes_lost",
                "partition=%d from=%" PRId64 " until=%" PRId64 " records=%" PRId64
                " action=\"the partition's agents are asked for all their classes\"",
                partition, seen + 1, offset, offset - (seen + 1));
        resync_ctx_t x = {w, partition};
        cmr_instr_cache_each_agent(w->cache, resync_agent, &x);
        resync_registered(w, partition);
    }
}

static int send_method_entries(worker_t *w, const cmr_instr_meta_t *meta, const cmr_instr_built_t *b)
{
    for (size_t i = 0; i < b->n_methods; i++) {
        uint64_t id = (uint64_t)b->methods[i].method_id;
        if (cmr_instr_cache_method_sent(w->cache, id) == 1)
            continue;
        const cmr_instr_method_t *m = &meta->methods[b->meta_index[i]];
        cmr_method_entry_t e = {b->methods[i].method_id, meta->name,   m->name, m->desc, m->access,
                                meta->source_file,       m->first_line};
        if (send_msg(w, CMR_MSG_METHOD_ENTRY, &e, NULL, NULL) != 0)
            return -1;
        cmr_instr_cache_put_method_sent(w->cache, id);
    }
    return 0;
}

/* Sends what cmr_instr_prepare() made for one class (the worker's thread, in order): the
 * Redefine with its grant or scope and the method entries, or only the method entries when
 * the agent runs those bytes already; logs the outcome. *sig becomes what the agent will
 * run (0: the original bytes). */
/* --- cmr.grants: the classes granted ahead, shared by the workers ---------------------------- */

/* A grant this worker kept for the first time (or renewed, or for other bytes) goes to
 * cmr.grants, compacted by environment and original digest, so that every worker, and this
 * one after a restart, can send it ahead (instr_ahead.h). A record that cannot be queued
 * is only logged: the grant still goes to the JVMs this worker serves. */
static void publish_grant(worker_t *w, const char *name, cmr_bytes_t original_digest, cmr_bytes_t grant,
                          cmr_bytes_t bytes)
{
    cmr_grant_t g;
    if (cmr_grant_decode(grant.data, grant.len, &g) != CMR_GRANT_OK)
        return;
    cmr_granted_class_t c = {(char *)name, original_digest, grant, bytes};
    cmr_class_grants_t rec = {.environment_id = g.environment_id, .revision = g.revision, .part = 1, .parts = 1};
    rec.classes.items = &c;
    rec.classes.count = 1;
    char key[CMR_GRANT_ENV_MAX + 2 + 2 * CMR_TRUST_DIGEST_BYTES], hex[2 * CMR_TRUST_DIGEST_BYTES + 1], err[256];
    cmr_hex(g.original_digest, sizeof g.original_digest, hex);
    int klen = snprintf(key, sizeof key, "%s/%s", g.environment_id, hex);
    cmr_buf_t payload = {0};
    int rc = klen > 0 && (size_t)klen < sizeof key &&
                     cmr_msg_encode(CMR_MSG_CLASS_GRANTS, &rec, &payload, err, sizeof err) == CMR_WIRE_OK
                 ? cmr_producer_send_raw(w->producer, cmr_topic_name(CMR_TOPIC_GRANTS), key, (size_t)klen, payload.data,
                                         payload.len, NULL)
                 : CMR_SEND_ERROR;
    cmr_buf_free(&payload);
    if (rc == CMR_SEND_OK)
        w->ahead_published++;
    else
        cmr_log(CMR_LOG_WARN, "instr.grant_not_published", "class=%s environment=%s result=%d", name, g.environment_id,
                rc);
}

/* Reads what cmr.grants has (at most `max` records, waiting up to timeout_ms for the
 * first) into the classes granted ahead; 1 once the reader has caught up. */
static int grants_step(worker_t *w, size_t max, int timeout_ms)
{
    cmr_reader_rec_t rec;
    for (size_t i = 0; w->grants_reader && i < max && cmr_reader_poll(w->grants_reader, i ? 0 : timeout_ms, &rec) == 1;
         i++) {
        if (!rec.payload) /* a tombstone */
            continue;
        cmr_msg_t m;
        char err[256];
        const char *why = cmr_msg_decode(rec.payload, rec.len, &m, err, sizeof err) == CMR_WIRE_OK ? NULL : err;
        if (!why) {
            why = cmr_instr_ahead_record_refusal(&m, cmr_signer_key_id(w->signer));
            if (!why) {
                const cmr_granted_class_t *c = &m.u.class_grants.classes.items[0];
                cmr_instr_ahead_put(w->ahead, c->grant.data, c->grant.len, c->bytecode.data, c->bytecode.len);
                w->ahead_read++;
            }
            cmr_msg_free(&m);
        }
        if (why) {
            w->ahead_refused++;
            unsigned long long suppressed = 0;
            if (cmr_log_allow(&w->ahead_refused_log, 1, &suppressed))
                cmr_log(CMR_LOG_WARN, "instr.grant_record_refused",
                        "partition=%d offset=%" PRId64 " error=\"%s\" suppressed=%llu", rec.partition, rec.offset, why,
                        suppressed);
        }
    }
    return !w->grants_reader || cmr_reader_caught_up(w->grants_reader);
}

static int emit_prepared(worker_t *w, uint64_t agent, const char *instance, int64_t loader, const char *name,
                         uint64_t hash, const cmr_instr_meta_t *meta, int64_t revision, const cmr_instr_prep_t *p,
                         uint64_t *sig)
{
    char topic[CMR_TOPIC_NAME_MAX];
    if (p->diag_failed) /* the class keeps the environment's bytes, and the cache says so */
        cmr_log(CMR_LOG_WARN, "instr.diagnosis_class_failed", "class=%s agent=%016" PRIx64 " diagnosis=%s error=\"%s\"",
                name, agent, p->asked->id, p->diag_error);
    *sig = p->sig;
    const cmr_instr_built_t *b = &p->built;
    int rc = 0;
    switch (p->status) {
    case CMR_PREP_NONE: break;
    case CMR_PREP_FAILED:
        cmr_log(CMR_LOG_WARN, "instr.class_failed", "class=%s agent=%016" PRIx64 " error=\"%s\"", name, agent, p->err);
        break;
    case CMR_PREP_REFUSED:
        cmr_log(CMR_LOG_INFO, "instr.class_refused", "class=%s agent=%016" PRIx64 " refused=%zu", name, agent,
                b->n_refused);
        break;
    case CMR_PREP_READY:
        if (p->agent_runs) {
            w->cached_at_agent++;
            rc = send_method_entries(w, meta, b);
            cmr_log(CMR_LOG_DEBUG, "instr.cached_at_agent", "class=%s agent=%016" PRIx64 " methods=%zu", name, agent,
                    b->n_methods);
            break;
        }
        if (command_topic(w, instance, topic, sizeof topic) != 0)
            break;
        if (p->grant_error[0])
            cmr_log(CMR_LOG_DEBUG, "instr.grant_not_made", "class=%s error=\"%s\"", name, p->grant_error);
        cmr_redefine_t r = {.request_id = request_id(agent, loader, name, hash, *sig, 1),
                            .agent_id = (int64_t)agent,
                            .class_name = (char *)name,
                            .loader_id = loader,
                            .class_hash = (int64_t)hash,
                            .original = false,
                            .revision = revision,
                            .bytecode = {b->bytes, b->len},
                            .original_digest = {(uint8_t *)p->original_digest, sizeof p->original_digest}};
        r.methods.items = b->methods;
        r.methods.count = b->n_methods;
        if (p->diag)
            r.diagnosis = (cmr_diagnosis_scope_t *)&p->scope;
        else if (p->grant.len)
            r.grant = (cmr_bytes_t){p->grant.data, p->grant.len};
        rc = send_msg(w, CMR_MSG_REDEFINE, &r, instance, topic);
        if (rc == 0)
            rc = send_method_entries(w, meta, b);
        if (rc == 0)
            w->redefines++;
        if (rc == 0 && w->ahead && r.grant.len && /* for the next JVMs of the environment */
            cmr_instr_ahead_put(w->ahead, r.grant.data, r.grant.len, b->bytes, b->len) == CMR_INSTR_AHEAD_KEPT)
            publish_grant(w, name, r.original_digest, r.grant, r.bytecode);
        cmr_log(p->diag ? CMR_LOG_INFO : CMR_LOG_DEBUG, "instr.redefine",
                "class=%s agent=%016" PRIx64 " methods=%zu refused=%zu diagnosis=%s", name, agent, b->n_methods,
                b->n_refused, p->diag ? p->diag->id : "-");
        break;
    }
    return rc;
}

/* The input of cmr_instr_prepare() for one class. */
static cmr_instr_prep_in_t prep_input(const worker_t *w, const char *name, const uint8_t *bytes, size_t len,
                                      const cmr_instr_meta_t *meta, const cmr_instr_decision_t *d,
                                      const cmr_instr_decision_t *env_d, const cmr_diagnosis_t *diag,
                                      const char *env_id, int64_t revision, const cmr_bytes_t *applied)
{
    return (cmr_instr_prep_in_t){.class_name = name,
                                 .bytes = bytes,
                                 .len = len,
                                 .meta = meta,
                                 .d = d,
                                 .env_d = env_d,
                                 .diag = diag,
                                 .sig_env = diag ? cmr_instr_decision_signature(meta, env_d) : 0,
                                 .applied = applied,
                                 .signer = w->signer,
                                 .grant_lifetime_ms = w->grant_lifetime_ms,
                                 .env_id = env_id,
                                 .revision = revision};
}

/* Instruments and sends a Redefine with new bytes, here and now (a class reconciled with
 * a changed environment or diagnosis; a unit's new classes go through the pool: see
 * "prepared side by side"). *sig is set to what the agent will run (0: every method was
 * refused, the class stays original). */
static int send_instrumented(worker_t *w, uint64_t agent, const char *instance, int64_t loader, const char *name,
                             uint64_t hash, const uint8_t *bytes, size_t len, const cmr_instr_meta_t *meta,
                             const cmr_instr_decision_t *d, const cmr_instr_decision_t *env_d,
                             const cmr_diagnosis_t *diag, const char *env_id, int64_t revision,
                             const cmr_bytes_t *applied, uint64_t *sig)
{
    if (w->replaying)
        return 0;
    cmr_instr_prep_in_t in = prep_input(w, name, bytes, len, meta, d, env_d, diag, env_id, revision, applied);
    cmr_instr_prep_t p;
    cmr_instr_prepare(&in, *sig, &p);
    int rc = emit_prepared(w, agent, instance, loader, name, hash, meta, revision, &p, sig);
    cmr_instr_prep_free(&p);
    return rc;
}

/* --- prepared side by side ---------------------------------------------------------- */

/*
 * The new classes of a unit (on_class) are queued as jobs instead of being instrumented
 * one by one: jobs_flush() has the pool prepare them side by side (cmr_instr_prepare:
 * instrumenting, digests, grants, the pure part) and then sends them here, in the order
 * they came, writing the signature the bytes turned out to have when it differs from the
 * decision's (every method refused, a diagnosis that did not fit). Anything sent while
 * jobs are queued (a waiting class reconciled, a resync) sends them first, so the order
 * of commands is the order of the sequential worker.
 *
 * Ownership: a job owns the metadata and decisions moved into it; its ClassLoaded belongs
 * to the unit's record, which outlives the job (jobs are flushed or discarded before the
 * unit ends).
 */
#define JOBS_MAX 256

typedef struct class_job {
    const cmr_class_loaded_t *cl; /* the unit's */
    uint64_t hash;
    cmr_instr_meta_t meta;         /* owned */
    cmr_instr_decision_t d, env_d; /* owned */
    const cmr_diagnosis_t *diag;
    int64_t revision;
    uint64_t sig;              /* the decision's */
    cmr_instr_class_rec_t rec; /* as written to the cache with it */
    cmr_instr_prep_t prep;     /* owned: filled by the pool */
    atomic_bool ready;         /* prep is filled (set last by the thread that prepared it) */
} class_job_t;

/* Moves meta and the decisions into a new job (*meta, *d, *env_d are left empty). */
static int job_queue(worker_t *w, const cmr_class_loaded_t *cl, uint64_t hash, cmr_instr_meta_t *meta,
                     cmr_instr_decision_t *d, cmr_instr_decision_t *env_d, const cmr_diagnosis_t *diag,
                     int64_t revision, uint64_t sig, class_job_t **out)
{
    if (w->njobs == JOBS_MAX && jobs_flush(w) != 0)
        return -1;
    class_job_t *j = &w->jobs[w->njobs++];
    *j = (class_job_t){.cl = cl,
                       .hash = hash,
                       .meta = *meta,
                       .d = *d,
                       .env_d = *env_d,
                       .diag = diag,
                       .revision = revision,
                       .sig = sig};
    atomic_init(&j->ready, false);
    memset(meta, 0, sizeof *meta);
    memset(d, 0, sizeof *d);
    memset(env_d, 0, sizeof *env_d);
    *out = j;
    return 0;
}

static void job_free(class_job_t *j)
{
    cmr_instr_prep_free(&j->prep);
    cmr_instr_decision_free(&j->d);
    cmr_instr_decision_free(&j->env_d);
    cmr_instr_meta_free(&j->meta);
}

/* One job, on a pool thread: reads the job and the worker's signer only. */
static void job_prepare(void *ctx, size_t i)
{
    worker_t *w = ctx;
    class_job_t *j = &w->jobs[i];
    const cmr_class_loaded_t *cl = j->cl;
    cmr_instr_prep_in_t in = prep_input(w, cl->class_name, cl->bytecode.data, cl->bytecode.len, &j->meta, &j->d,
                                        &j->env_d, j->diag, cl->environment_id, j->revision, &cl->applied_digest);
    cmr_instr_prepare(&in, j->sig, &j->prep);
    atomic_store_explicit(&j->ready, true, memory_order_release);
}

/* Drops the queued jobs unsent (the unit is rolled back). */
static void jobs_discard(worker_t *w)
{
    for (size_t i = 0; i < w->njobs; i++)
        job_free(&w->jobs[i]);
    w->njobs = 0;
}

/* Waits until job i is prepared, preparing others meanwhile. */
static void job_wait(worker_t *w, class_job_t *j)
{
    while (!atomic_load_explicit(&j->ready, memory_order_acquire))
        if (!cmr_workpool_help(w->pool))
            sched_yield(); /* a helper has it */
}

/* Prepares the queued jobs side by side and sends each, in order, as soon as it and those
 * before it are prepared (a class's Redefine does not wait for the whole round). 0 or -1
 * (a send failed: the rest are dropped, the unit is rolled back). */
static int jobs_flush(worker_t *w)
{
    if (!w->njobs)
        return 0;
    cmr_workpool_start(w->pool, w->njobs, job_prepare, w);
    int rc = 0;
    w->emitting = true;
    for (size_t i = 0; i < w->njobs && rc == 0; i++) {
        class_job_t *j = &w->jobs[i];
        int64_t t0 = cmr_mono_ns();
        job_wait(w, j);
        w->prepare_us += (uint64_t)(cmr_mono_ns() - t0) / 1000;
        const cmr_class_loaded_t *cl = j->cl;
        uint64_t sig = j->sig;
        rc = emit_prepared(w, (uint64_t)cl->agent_id, cl->instance_id, cl->loader_id, cl->class_name, j->hash, &j->meta,
                           j->revision, &j->prep, &sig);
        if (rc == 0 && sig != j->sig) {
            j->rec.signature = sig;
            cmr_instr_cache_put_class(w->cache, (uint64_t)cl->agent_id, cl->loader_id, cl->class_name, &j->rec);
        }
    }
    cmr_workpool_wait(w->pool); /* every job done before any is freed */
    w->emitting = false;
    w->prepared += w->njobs;
    jobs_discard(w);
    return rc;
}

/* --- one class ---------------------------------------------------------------------- */

/* What the agent runs for a decision: 0 = the original bytes; the same probes for another
 * diagnosis are other bytes (another scope). */
static uint64_t class_signature(const cmr_instr_meta_t *meta, const cmr_instr_decision_t *d,
                                const cmr_diagnosis_t *diag)
{
    uint64_t sig = cmr_instr_decision_signature(meta, d);
    if (sig && diag) /* a new revision (other limits, other conditions) is another scope too */
        sig = (sig ^ cmr_hash_bytes(diag->id, strlen(diag->id)) ^ cmr_hash_u64((uint64_t)diag->revision)) | 1;
    return sig;
}

typedef struct target {
    uint64_t agent;
    const char *instance;
    const char *env_id;
    const cmr_environment_t *env;
    int64_t revision;
} target_t;

/* A Redefine with the original bytes (bound to themselves): instrumentation removed. */
static int send_original(worker_t *w, uint64_t agent, const char *instance, int64_t loader, const char *name,
                         uint64_t hash, const uint8_t *bytes, size_t len, int64_t revision)
{
    char topic[CMR_TOPIC_NAME_MAX];
    if (w->replaying || command_topic(w, instance, topic, sizeof topic) != 0)
        return 0;
    uint8_t digest[CMR_TRUST_DIGEST_BYTES];
    cmr_trust_digest(bytes, len, digest);
    cmr_redefine_t r = {.request_id = request_id(agent, loader, name, hash, 0, 3),
                        .agent_id = (int64_t)agent,
                        .class_name = (char *)name,
                        .loader_id = loader,
                        .class_hash = (int64_t)hash,
                        .original = true,
                        .revision = revision,
                        .bytecode = {(uint8_t *)bytes, len},
                        .original_digest = {digest, sizeof digest}};
    int rc = send_msg(w, CMR_MSG_REDEFINE, &r, instance, topic);
    w->originals += rc == 0;
    return rc;
}

/* Brings one cached class of an agent in line with its environment. */
static int reconcile(worker_t *w, const target_t *t, int64_t loader, const char *name, cmr_instr_class_rec_t *rec)
{
    cmr_instr_meta_t meta;
    if (cmr_instr_cache_meta(w->cache, rec->hash, &meta) != 1)
        return 0;
    cmr_instr_decision_t env_d, d = {0};
    const cmr_diagnosis_t *diag = NULL;
    int rc = decide(w, t->agent, loader, name, &meta, t->env, &env_d);
    if (rc == 0) /* a running diagnosis' probes on top (instr_diagnose.h) */
        rc = cmr_instr_diag_overlay(w->diag, t->agent, &meta, &env_d, &d, &diag);
    uint64_t sig = rc == 0 ? class_signature(&meta, &d, diag) : rec->signature;
    if (rc != 0 || sig == rec->signature) {
        if (rc == 0 && rec->revision != t->revision) {
            rec->revision = t->revision;
            cmr_instr_cache_put_class(w->cache, t->agent, loader, name, rec);
        }
        cmr_instr_decision_free(&d);
        cmr_instr_decision_free(&env_d);
        cmr_instr_meta_free(&meta);
        return rc;
    }
    if (cmr_instr_class_rec_ids(rec, t->instance, t->env_id) != 0) {
        cmr_log(CMR_LOG_WARN, "instr.id_too_long", "class=%s agent=%016" PRIx64 " environment=%s", name, t->agent,
                t->env_id);
        cmr_instr_decision_free(&d);
        cmr_instr_decision_free(&env_d);
        cmr_instr_meta_free(&meta);
        return 0;
    }
    cmr_buf_t bytes = {0};
    int have = cmr_instr_cache_bytes(w->cache, rec->hash, &bytes);
    char topic[CMR_TOPIC_NAME_MAX];
    rec->revision = t->revision;
    if (have < 0) {
        rc = -1;
    } else if (sig != 0 && have == 1) {
        cmr_instr_cache_pin(w->cache, rec->hash);
        rc = send_instrumented(w, t->agent, t->instance, loader, name, rec->hash, bytes.data, bytes.len, &meta, &d,
                               &env_d, diag, t->env_id, t->revision, NULL, &sig);
        rec->signature = sig;
        rec->resend = 0;
    } else if (sig != 0) {
        if (!rec->resend && command_topic(w, t->instance, topic, sizeof topic) == 0) {
            cmr_bytecode_resend_t r = {request_id(t->agent, loader, name, rec->hash, sig, 2), (int64_t)t->agent,
                                       (char *)name, loader, (int64_t)rec->hash};
            rc = send_msg(w, CMR_MSG_BYTECODE_RESEND, &r, t->instance, topic);
            w->resends += rc == 0;
        }
        rec->resend = !w->replaying;
    } else if (have == 1) {
        rc = send_original(w, t->agent, t->instance, loader, name, rec->hash, bytes.data, bytes.len, t->revision);
        rec->signature = 0;
        rec->resend = 0;
    } else {
        cmr_log(CMR_LOG_WARN, "instr.original_missing", "class=%s agent=%016" PRIx64, name, t->agent);
        rec->signature = 0;
    }
    if (rc == 0)
        cmr_instr_cache_put_class(w->cache, t->agent, loader, name, rec);
    cmr_buf_free(&bytes);
    cmr_instr_decision_free(&d);
    cmr_instr_decision_free(&env_d);
    cmr_instr_meta_free(&meta);
    return rc;
}

/* Classes of an agent (collected first: the cache is not written while it is being
 * iterated). */
typedef struct class_ref {
    int64_t loader;
    char *name; /* owned */
    cmr_instr_class_rec_t rec;
} class_ref_t;

typedef struct class_list {
    class_ref_t *items; /* owned */
    size_t n, cap;
} class_list_t;

static int class_list_add(class_list_t *l, int64_t loader, const char *name, const cmr_instr_class_rec_t *r)
{
    if (CMR_ARRAY_GROW(l->items, l->cap, l->n + 1) != 0)
        return -1;
    class_ref_t *c = &l->items[l->n];
    *c = (class_ref_t){loader, strdup(name), {0}};
    if (!c->name)
        return -1;
    if (r)
        c->rec = *r;
    l->n++;
    return 0;
}

static void class_list_free(class_list_t *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->items[i].name);
    free(l->items);
    memset(l, 0, sizeof *l);
}

static int collect_waiter(int64_t loader, const char *name, void *ud)
{
    return class_list_add(ud, loader, name, NULL);
}

/* Re-decides the classes that were waiting for `type` (collected first: the cache is not
 * written while it is being iterated). */
static int resolve_waiters(worker_t *w, const target_t *t, const char *type)
{
    class_list_t x = {0};
    int rc = cmr_instr_cache_each_waiting(w->cache, t->agent, type, collect_waiter, &x) ? -1 : 0;
    if (rc == 0 && x.n) /* the waiting classes' signatures as sent: the unit's queued classes go first */
        rc = jobs_flush(w);
    for (size_t i = 0; i < x.n; i++) {
        cmr_instr_class_rec_t rec;
        cmr_instr_cache_del_waiting(w->cache, t->agent, type, x.items[i].loader, x.items[i].name);
        if (rc == 0 && cmr_instr_cache_class(w->cache, t->agent, x.items[i].loader, x.items[i].name, &rec) == 1)
            rc = reconcile(w, t, x.items[i].loader, x.items[i].name, &rec);
    }
    class_list_free(&x);
    return rc;
}

static const cmr_environment_t *env_of(worker_t *w, const char *env_id, int64_t *revision)
{
    *revision = 0;
    return env_id ? cmr_cfg_state_env(w->state, env_id, revision) : NULL;
}

/* A ClassLoaded whose bytes do not hash to its class_hash: forged, or damaged on the way.
 * Counted, and logged (rate-limited: anyone who can write cmr.classes can send them). */
static void refuse_mismatch(worker_t *w, const cmr_class_loaded_t *cl, uint64_t computed)
{
    w->hash_mismatch++;
    cmr_reject_count(cmr_topic_name(CMR_TOPIC_CLASSES), "hash_mismatch");
    unsigned long long suppressed = 0;
    if (!cmr_log_allow(&w->mismatch_limit, 10, &suppressed))
        return;
    char name[256], instance[80];
    cmr_log(CMR_LOG_WARN, "instr.hash_mismatch",
            "class=\"%s\" agent=%016" PRIx64 " instance=\"%s\" sent=%016" PRIx64 " computed=%016" PRIx64
            " action=refused refused_total=%" PRIu64 " suppressed=%llu",
            cmr_log_escape(cl->class_name, name, sizeof name), (uint64_t)cl->agent_id,
            cmr_log_escape(cl->instance_id, instance, sizeof instance), (uint64_t)cl->class_hash, computed,
            w->hash_mismatch, suppressed);
}

/* --- classes granted ahead (instr_ahead.h) ---------------------------------------------- */

#define AHEAD_MESSAGE_BYTES (1u << 20) /* grants and bytes per ClassGrants message */
#define GRANTS_CATCH_UP_MS 10000       /* cmr.grants read at most this long before the first unit */

/* Grants renewed in one go before a JVM is sent its classes ahead (the rest at the next). */
#define AHEAD_RENEW_MAX 4096

/* A grant renewed by cmr_instr_ahead_renew goes to cmr.grants, as a new one does. */
static void publish_renewed(const char *name, const uint8_t original_digest[32], const cmr_bytes_t *grant,
                            const cmr_bytes_t *bytes, void *ud)
{
    publish_grant(ud, name, (cmr_bytes_t){(uint8_t *)original_digest, CMR_TRUST_DIGEST_BYTES}, *grant, *bytes);
}

/* The signer's own public key, to check a grant before it is signed again (made once). */
static const cmr_verifier_t *own_key(worker_t *w)
{
    char err[256];
    if (!w->own_key && (w->own_key = cmr_verifier_new("cmr-instrumenter", NULL)) &&
        cmr_verifier_add_signer(w->own_key, w->signer, err, sizeof err) != 0) {
        cmr_verifier_free(w->own_key);
        w->own_key = NULL;
    }
    return w->own_key;
}

typedef struct ahead_ctx {
    worker_t *w;
    const char *instance, *topic;
    size_t bytes;
} ahead_ctx_t;

static int send_ahead_part(const cmr_class_grants_t *m, void *ud)
{
    ahead_ctx_t *x = ud;
    for (size_t i = 0; i < m->classes.count; i++)
        x->bytes += m->classes.items[i].bytecode.len + m->classes.items[i].grant.len;
    return send_msg(x->w, CMR_MSG_CLASS_GRANTS, m, x->instance, x->topic);
}

/* The first record of a JVM (a new instance of the agent): the classes this worker has
 * granted for its environment at the current revision go to it now, before it loads
 * them, in ClassGrants commands; the agent instruments them as they load. An agent that
 * does not say it reads ClassGrants (ClassLoaded.agent_features: one from before them,
 * which would refuse them as an unknown schema, or one with agent.preload.max.bytes 0,
 * which would drop them) is sent none. */
static int send_ahead(worker_t *w, const cmr_class_loaded_t *cl)
{
    int64_t revision;
    uint64_t agent = (uint64_t)cl->agent_id;
    const char *instance = cl->instance_id, *env_id = cl->environment_id;
    if (!w->ahead || w->replaying || !env_of(w, env_id, &revision))
        return 0;
    size_t held = cmr_instr_ahead_count(w->ahead, env_id, revision), n = 0;
    char topic[CMR_TOPIC_NAME_MAX];
    if (held == 0 || command_topic(w, instance, topic, sizeof topic) != 0)
        return 0;
    if (!(cl->agent_features & CMR_AGENT_READS_CLASS_GRANTS)) {
        w->ahead_unread++;
        cmr_log(CMR_LOG_DEBUG, "instr.granted_ahead_unread", "agent=%016" PRIx64 " held=%zu features=%" PRId64, agent,
                held, cl->agent_features);
        return 0;
    }
    int64_t t0 = cmr_mono_ns();
    char eenv[300];
    size_t dropped;
    size_t renewed = cmr_instr_ahead_renew(w->ahead, env_id, revision, cmr_wall_ms(), AHEAD_RENEW_MAX, own_key(w),
                                           w->signer, w->grant_lifetime_ms, publish_renewed, w, &dropped);
    if (dropped)
        cmr_log(CMR_LOG_WARN, "instr.grants_not_renewed",
                "environment=\"%s\" dropped=%zu reason=\"not verified under this worker's own key\"",
                cmr_log_escape(env_id, eenv, sizeof eenv), dropped);
    w->ahead_renewed += renewed;
    ahead_ctx_t x = {w, instance, topic, 0};
    int rc = cmr_instr_ahead_messages(w->ahead, env_id, revision, (int64_t)agent, cmr_wall_ms(),
                                      (size_t)w->ahead_jvm_bytes, AHEAD_MESSAGE_BYTES, send_ahead_part, &x, &n);
    if (rc == 0) {
        w->ahead_sets++;
        w->ahead_classes += n;
    }
    cmr_log(rc == 0 ? CMR_LOG_INFO : CMR_LOG_WARN, "instr.granted_ahead",
            "agent=%016" PRIx64 " environment=\"%s\" revision=%" PRId64
            " classes=%zu held=%zu renewed=%zu bytes=%zu took_us=%lld%s",
            agent, cmr_log_escape(env_id, eenv, sizeof eenv), revision, n, held, renewed, x.bytes,
            (long long)((cmr_mono_ns() - t0) / 1000), rc == 0 ? "" : " result=failed");
    return rc;
}

/* Handles one ClassLoaded inside the current unit. */
static int on_class(worker_t *w, const cmr_class_loaded_t *cl, int32_t partition)
{
    uint64_t agent = (uint64_t)cl->agent_id;
    if (!cl->class_name || !cl->class_name[0] || cl->bytecode.len == 0) {
        cmr_log(CMR_LOG_WARN, "instr.class_rejected", "agent=%016" PRIx64 " reason=\"no class name or no bytes\"",
                agent);
        return 0;
    }
    uint64_t hash = cmr_class_hash(cl->bytecode.data, cl->bytecode.len);
    if (hash != (uint64_t)cl->class_hash) {
        refuse_mismatch(w, cl, hash);
        return 0; /* nothing instrumented, cached or recorded from it */
    }
    cmr_instr_agent_rec_t ar = {cl->revision, partition, "", ""};
    cmr_instr_class_rec_t rec = {0};
    if (cmr_instr_agent_rec_ids(&ar, cl->instance_id, cl->environment_id) != 0 ||
        cmr_instr_class_rec_ids(&rec, cl->instance_id, cl->environment_id) != 0) {
        cmr_log(CMR_LOG_WARN, "instr.class_rejected",
                "agent=%016" PRIx64 " reason=\"instance or environment id too long\"", agent);
        return 0;
    }
    w->classes++;
    cmr_instr_agent_rec_t known;
    bool new_jvm =
        cmr_instr_cache_agent(w->cache, agent, &known) == 0 || strcmp(known.instance_id, cl->instance_id) != 0;
    cmr_instr_cache_put_agent(w->cache, agent, &ar);
    if (ask_resync(w, agent, cl->instance_id, partition) != 0)
        return -1;
    if (new_jvm && send_ahead(w, cl) != 0)
        return -1;
    if (w->ahead && !w->replaying) /* which classes the JVMs of an environment load most */
        cmr_instr_ahead_loaded(w->ahead, cl->environment_id, cl->class_name);

    cmr_instr_meta_t meta;
    char err[512];
    int have = cmr_instr_cache_meta(w->cache, hash, &meta);
    if (have < 0)
        return -1;
    if (have == 0) {
        if (cmr_instr_meta_extract(cl->bytecode.data, cl->bytecode.len, &meta, err, sizeof err) != 0) {
            cmr_log(CMR_LOG_WARN, "instr.class_rejected", "class=%s agent=%016" PRIx64 " reason=\"%s\"", cl->class_name,
                    agent, err);
            return 0;
        }
        cmr_instr_cache_put_meta(w->cache, hash, &meta);
    }
    if (strcmp(meta.name, cl->class_name) != 0)
        cmr_log(CMR_LOG_WARN, "instr.name_mismatch", "sent=%s class_file=%s", cl->class_name, meta.name);
    cmr_instr_cache_put_type(w->cache, agent, meta.name, hash);

    int64_t revision;
    const cmr_environment_t *env = env_of(w, cl->environment_id, &revision);
    if (!env)
        cmr_log(CMR_LOG_WARN, "instr.unknown_environment", "environment=%s agent=%016" PRIx64 " class=%s",
                cl->environment_id, agent, cl->class_name);
    target_t t = {agent, cl->instance_id, cl->environment_id, env, revision};
    cmr_instr_decision_t env_d, d = {0};
    const cmr_diagnosis_t *diag = NULL;
    int rc = decide(w, agent, cl->loader_id, cl->class_name, &meta, env, &env_d);
    if (rc == 0)
        rc = cmr_instr_diag_overlay(w->diag, agent, &meta, &env_d, &d, &diag);
    uint64_t sig = rc == 0 ? class_signature(&meta, &d, diag) : 0;
    if (rc == 0)
        /* a class waiting for types may need its bytes once they arrive: keep them */
        rc = cmr_instr_cache_put_bytes(w->cache, hash, cl->bytecode.data, cl->bytecode.len,
                                       sig != 0 || env_d.missing.count > 0 ||
                                           cl->cause == CMR_CLASS_RESEND /* asked for: needed */);
    char *type = strdup(meta.name); /* the meta may go to a job, and the job away */
    class_job_t *job = NULL;
    if (!type)
        rc = -1;
    else if (rc == 0 && sig != 0 && !w->replaying)
        /* prepared in the pool with the unit's other classes, sent in order by jobs_flush() */
        rc = job_queue(w, cl, hash, &meta, &d, &env_d, diag, revision, sig, &job);
    else if (rc == 0 && sig == 0 && cl->applied_digest.len > 0)
        /* the agent runs cached instrumented bytes the environment no longer wants */
        rc = send_original(w, agent, cl->instance_id, cl->loader_id, cl->class_name, hash, cl->bytecode.data,
                           cl->bytecode.len, revision);
    if (rc == 0) {
        rec.hash = hash;
        rec.signature = sig; /* the decision's: jobs_flush() corrects it if the bytes say otherwise */
        rec.revision = revision;
        cmr_instr_cache_put_class(w->cache, agent, cl->loader_id, cl->class_name, &rec);
        if (job)
            job->rec = rec;
        rc = resolve_waiters(w, &t, type);
    }
    free(type);
    cmr_instr_decision_free(&d);
    cmr_instr_decision_free(&env_d);
    cmr_instr_meta_free(&meta);
    return rc;
}

/* --- units: flush, commit ----------------------------------------------------------- */

static void unit_begin(worker_t *w)
{
    w->sent = 0;
}

/* Waits until every queued message is delivered or failed (reported by the producer's
 * own thread). Polls the outstanding count finely: rd_kafka_flush() sleeps in 10 ms steps
 * when another thread serves the delivery reports, which would add to every unit. */
static int wait_delivered(worker_t *w, int timeout_ms)
{
    int64_t deadline = mono_ms() + timeout_ms;
    while (cmr_producer_outstanding(w->producer) > 0) {
        if (mono_ms() > deadline)
            return -1;
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* Every command of the unit delivered, then the cache written. 0 or -1 (rolled back). */
static int unit_end(worker_t *w)
{
    char err[256];
    if (w->sent) {
        cmr_producer_stats_t before, after;
        cmr_producer_stats(w->producer, &before);
        if (wait_delivered(w, 30000) != 0) {
            cmr_log(CMR_LOG_ERROR, "instr.delivery_timeout", "outstanding=%d", cmr_producer_outstanding(w->producer));
            cmr_instr_cache_rollback(w->cache);
            return -1;
        }
        cmr_producer_stats(w->producer, &after);
        if (after.failed != before.failed)
            cmr_log(CMR_LOG_ERROR, "instr.delivery_failed", "failed=%" PRIu64, after.failed - before.failed);
    }
    if (cmr_instr_cache_commit(w->cache, err, sizeof err) != 0) {
        cmr_log(CMR_LOG_ERROR, "instr.cache_commit_failed", "error=\"%s\"", err);
        return -1;
    }
    return 0;
}

/* --- environment runs --------------------------------------------------------------- */

static int collect_class(int64_t loader, const char *name, const cmr_instr_class_rec_t *r, void *ud)
{
    return class_list_add(ud, loader, name, r);
}

typedef struct agent_ref {
    uint64_t agent;
    cmr_instr_agent_rec_t rec;
} agent_ref_t;

typedef struct env_run {
    worker_t *w;
    const char *env_id;
    agent_ref_t *agents; /* owned */
    size_t n, cap;
} env_run_t;

static int collect_agent(uint64_t agent, const cmr_instr_agent_rec_t *r, void *ud)
{
    env_run_t *x = ud;
    if (strcmp(r->env_id, x->env_id) != 0 || r->partition < 0 || r->partition >= MAX_PARTITIONS ||
        !x->w->owned[r->partition])
        return 0;
    if (CMR_ARRAY_GROW(x->agents, x->cap, x->n + 1) != 0)
        return -1;
    x->agents[x->n++] = (agent_ref_t){agent, *r};
    return 0;
}

/* Runs environment env_id (NULL content = deleted: no sensors) against the cache. */
static int run_env(worker_t *w, const char *env_id)
{
    int64_t revision;
    const cmr_environment_t *env = env_of(w, env_id, &revision);
    if (!env)
        revision = cmr_cfg_state_key_revision(w->state, env_id);
    env_run_t x = {w, env_id, NULL, 0, 0};
    cmr_instr_cache_each_agent(w->cache, collect_agent, &x);
    uint64_t before[3] = {w->redefines, w->resends, w->originals};
    size_t n_classes = 0;
    int rc = 0;
    for (size_t i = 0; i < x.n && rc == 0; i++) {
        class_list_t l = {0};
        cmr_instr_cache_each_class(w->cache, x.agents[i].agent, collect_class, &l);
        target_t t = {x.agents[i].agent, x.agents[i].rec.instance_id, env_id, env, revision};
        unit_begin(w);
        for (size_t j = 0; j < l.n && rc == 0; j++)
            if (strcmp(l.items[j].rec.instance_id, t.instance) == 0) /* loader ids are per run */
                rc = reconcile(w, &t, l.items[j].loader, l.items[j].name, &l.items[j].rec);
        n_classes += l.n;
        class_list_free(&l);
        if (rc == 0)
            rc = unit_end(w);
        else
            cmr_instr_cache_rollback(w->cache);
    }
    if (rc == 0) {
        cmr_instr_cache_put_env_run(w->cache, env_id, revision);
        char err[256];
        rc = cmr_instr_cache_commit(w->cache, err, sizeof err);
    }
    cmr_log(CMR_LOG_INFO, "instr.environment_run",
            "environment=%s revision=%" PRId64 " agents=%zu classes=%zu redefined=%" PRIu64 " resend=%" PRIu64
            " restored=%" PRIu64 " ok=%d",
            env_id, revision, x.n, n_classes, w->redefines - before[0], w->resends - before[1],
            w->originals - before[2], rc == 0);
    free(x.agents);
    return rc;
}

/* Environments whose current revision has not been run against the cache yet. */
static void run_pending_envs(worker_t *w)
{
    for (size_t i = 0;; i++) {
        int64_t rev, done;
        const cmr_environment_t *e = cmr_cfg_state_env_at(w->state, i, &rev);
        if (!e)
            break;
        if (cmr_instr_cache_env_run(w->cache, e->id, &done) != 1 || done != rev)
            run_env(w, e->id);
    }
}

/* --- the overhead budget (instr_budget.h) -------------------------------------------- */

/* Empties be: its environment moved to `revision` (0: the environment is gone). */
static void budget_env_clear(budget_env_t *be, int64_t revision)
{
    cmr_u64map_clear(&be->set);
    be->n = 0;
    be->sorted = true;
    be->run_again = false;
    be->revision = revision;
}

/* The removal set of env_id at `revision`: made when new, emptied when it held an older
 * revision; NULL when it holds a newer one (the caller's removal is stale), or out of memory. */
static budget_env_t *budget_env_at(worker_t *w, const char *env_id, int64_t revision)
{
    budget_env_t *be = budget_env(w, env_id);
    if (!be) {
        if (strlen(env_id) >= sizeof be->env_id ||
            CMR_ARRAY_GROW(w->budget.envs, w->budget.cap_envs, w->budget.n_envs + 1) != 0)
            return NULL;
        be = &w->budget.envs[w->budget.n_envs++];
        memset(be, 0, sizeof *be);
        snprintf(be->env_id, sizeof be->env_id, "%s", env_id);
        be->sorted = true;
        be->revision = revision;
    }
    if (be->revision < revision)
        budget_env_clear(be, revision);
    return be->revision == revision ? be : NULL;
}

/* Adds method `id` to the removals of env_id at `revision`: 1 when new, 0 when known or
 * stale (an older revision), -1 when refused (out of memory, past BUDGET_MAX_REMOVED). */
static int budget_add(worker_t *w, const char *env_id, int64_t revision, uint64_t id)
{
    budget_env_t *be = budget_env_at(w, env_id, revision);
    if (!be)
        return budget_env(w, env_id) ? 0 : -1;
    bool created = false;
    if (cmr_u64map_has(&be->set, id))
        return 0;
    if (be->n >= BUDGET_MAX_REMOVED || CMR_ARRAY_GROW(be->ids, be->cap, be->n + 1) != 0 ||
        !cmr_u64map_get_slot(&be->set, id, &created))
        return -1;
    be->ids[be->n++] = id;
    be->sorted = be->n < 2 || (be->sorted && be->ids[be->n - 2] < id);
    return 1;
}

/* Writes one removal to cmr.budget (asynchronously: the producer reports a failed delivery;
 * the removal holds in this worker's memory either way). */
static void budget_publish(worker_t *w, const char *env_id, int64_t revision, uint64_t agent,
                           const cmr_budget_removal_t *r)
{
    cmr_budget_removal_msg_t m = {.environment_id = (char *)env_id,
                                  .revision = revision,
                                  .method_id = (int64_t)r->method_id,
                                  .agent_id = (int64_t)agent,
                                  .time_ms = cmr_wall_ms(),
                                  .calls = r->calls,
                                  .self_ns_per_call = r->self_ns_per_call,
                                  .cost_pct = r->cost_pct,
                                  .reason = (char *)r->reason};
    char err[256];
    if (cmr_producer_send(w->producer, CMR_MSG_BUDGET_REMOVAL, &m, NULL, NULL, err, sizeof err) != CMR_SEND_OK)
        cmr_log(CMR_LOG_WARN, "instr.budget_not_written",
                "environment=%s method=%016" PRIx64 " error=\"%s\" effect=\"a restarted worker learns it again\"",
                env_id, r->method_id, err);
}

/* The overhead budget of an environment, in % of each JVM's CPU time: its own
 * (Environment.overhead_budget_pct), else instrumenter.budget.pct; 0: off. */
static double budget_pct_of(const worker_t *w, const cmr_environment_t *env)
{
    if (env->overhead_budget_pct < 0)
        return 0;
    return env->overhead_budget_pct > 0 ? env->overhead_budget_pct : w->budget.pct;
}

/* One JVM's window is complete: choose, list, write to cmr.budget, and instrument its
 * environment again. */
static void budget_judge(worker_t *w, uint64_t agent, const char *env_id, cmr_budget_window_t *win)
{
    int64_t revision = 0;
    const cmr_environment_t *env = cmr_cfg_state_env(w->state, env_id, &revision);
    double pct = env ? budget_pct_of(w, env) : 0;
    if (pct <= 0)
        return; /* an environment this worker does not know (any more), or its budget is off */
    cmr_budget_input_t in = cmr_budget_window_input(win, w->budget.probe_ns, pct);
    budget_env_t *be = budget_env_at(w, env_id, revision);
    if (be) { /* removed already: not counted again while their Redefines land */
        in.removed = budget_env_ids(be);
        in.n_removed = be->n;
    }
    cmr_budget_result_t r;
    if (cmr_budget_select(&in, &r) != 0)
        return;
    cmr_log(r.n_removed ? CMR_LOG_INFO : CMR_LOG_DEBUG, "instr.budget",
            "agent=%016" PRIx64 " environment=%s budget_pct=%g methods=%zu before_pct=%.2f after_pct=%.2f removed=%zu "
            "over_budget=%d "
            "calls_recorded=%" PRId64 " calls_dropped=%" PRId64 " scale=%.2f probe_ns=%.1f probe_cost=%s agent_ns=%.1f",
            agent, env_id, pct, win->n, r.before_pct, r.after_pct, r.n_removed, r.over_budget, win->calls_recorded,
            win->calls_dropped, in.scale, in.probe_ns, win->probe_ps > 0 ? "measured" : "setting", in.agent_ns);
    size_t added = 0;
    for (size_t i = 0; i < r.n_removed; i++) {
        cmr_log(CMR_LOG_INFO, "instr.budget_removed",
                "environment=%s method=%016" PRIx64 " agent=%016" PRIx64 " reason=\"%s\"", env_id,
                r.removed[i].method_id, agent, r.removed[i].reason);
        if (budget_add(w, env_id, revision, r.removed[i].method_id) == 1) {
            budget_publish(w, env_id, revision, agent, &r.removed[i]);
            added++;
        }
    }
    w->budget.removed += added;
    cmr_budget_result_free(&r);
    if (added > 0) {
        char copy[sizeof w->budget.envs[0].env_id];
        snprintf(copy, sizeof copy, "%s", env_id);
        run_env(w, copy);
    }
}

/* One record of cmr.budget: a removal decided by this worker or another (or before a
 * restart). Kept when it belongs to its environment's current revision; `live`: the
 * environment is instrumented again once the records at hand are in (budget_rerun). */
static void on_removal_record(worker_t *w, const cmr_reader_rec_t *rec, bool live)
{
    cmr_msg_t m;
    char err[160];
    int64_t revision = 0;
    const char *why = NULL;
    if (cmr_msg_decode(rec->payload, rec->len, &m, err, sizeof err) != CMR_WIRE_OK) {
        why = err;
    } else if (m.type != CMR_MSG_BUDGET_REMOVAL) {
        why = "not a BudgetRemoval";
    } else if (!cmr_cfg_state_env(w->state, m.u.budget_removal.environment_id, &revision) ||
               m.u.budget_removal.revision < revision) {
        cmr_msg_free(&m); /* an environment gone, or an older revision of it: not any more */
        return;
    } else {
        const cmr_budget_removal_msg_t *r = &m.u.budget_removal;
        int added = budget_add(w, r->environment_id, r->revision, (uint64_t)r->method_id);
        if (added < 0) {
            why = "too many removals for the environment, or out of memory";
        } else if (added > 0) {
            w->budget.restored++;
            budget_env_t *be = budget_env(w, r->environment_id);
            if (be && live)
                be->run_again = true;
        }
    }
    if (why) {
        w->budget.refused++;
        unsigned long long suppressed = 0;
        if (cmr_log_allow(&w->budget.refused_log, 1, &suppressed))
            cmr_log(CMR_LOG_WARN, "instr.budget_record_refused",
                    "partition=%d offset=%" PRId64 " error=\"%s\" suppressed=%llu", rec->partition, rec->offset, why,
                    suppressed);
    }
    if (why != err)
        cmr_msg_free(&m);
}

/* Reads what cmr.budget has (at most `max` records, waiting up to timeout_ms for the
 * first); 1 once the reader has caught up with the topic. */
static int budget_read_removals(worker_t *w, size_t max, int timeout_ms, bool live)
{
    cmr_reader_rec_t rec;
    for (size_t i = 0; w->budget.removals_reader && i < max &&
                       cmr_reader_poll(w->budget.removals_reader, i ? 0 : timeout_ms, &rec) == 1;
         i++)
        on_removal_record(w, &rec, live);
    return !w->budget.removals_reader || cmr_reader_caught_up(w->budget.removals_reader);
}

/* Instruments again the environments that gained removals from cmr.budget (another
 * worker's judgement): once per environment for all the records at hand. */
static void budget_rerun(worker_t *w)
{
    for (size_t i = 0; i < w->budget.n_envs; i++) {
        if (!w->budget.envs[i].run_again)
            continue;
        w->budget.envs[i].run_again = false;
        char copy[sizeof w->budget.envs[0].env_id];
        snprintf(copy, sizeof copy, "%s", w->budget.envs[i].env_id);
        run_env(w, copy); /* (may grow w->budget.envs: nothing held across it) */
    }
}

/* A JVM that sent no MetricBatch for this long (stopped, or moved to another worker) has
 * its window freed: windows are per JVM, and JVMs come and go. */
#define BUDGET_WINDOW_IDLE_MS (10 * 60 * 1000)

/* Frees the windows of JVMs gone quiet (once a minute). */
static void budget_sweep(worker_t *w, int64_t now)
{
    if (now - w->budget.swept_ms < 60000)
        return;
    w->budget.swept_ms = now;
    uint64_t gone[256];
    size_t n = 0, it = 0;
    uint64_t agent;
    void *val;
    while (n < sizeof gone / sizeof gone[0] && cmr_u64map_next(&w->budget.windows, &it, &agent, &val))
        if (now - ((cmr_budget_window_t *)val)->last_ms > BUDGET_WINDOW_IDLE_MS)
            gone[n++] = agent;
    for (size_t i = 0; i < n; i++) {
        cmr_budget_window_t *win = cmr_u64map_get(&w->budget.windows, gone[i]);
        cmr_u64map_del(&w->budget.windows, gone[i], NULL);
        cmr_budget_window_free(win);
        free(win);
    }
    if (n)
        cmr_log(CMR_LOG_DEBUG, "instr.budget_windows_freed", "windows=%zu left=%zu", n,
                cmr_u64map_count(&w->budget.windows));
}

/* Takes the removals other workers wrote, and the MetricBatches that arrived (of the JVMs
 * whose classes this worker owns). */
static void budget_step(worker_t *w)
{
    budget_sweep(w, mono_ms());
    budget_read_removals(w, 4096, 0, true);
    budget_rerun(w);
    cmr_reader_rec_t rec;
    for (int i = 0; w->budget.reader && i < 256 && cmr_reader_poll(w->budget.reader, 0, &rec) == 1; i++) {
        cmr_msg_t m;
        char err[128];
        if (cmr_msg_decode(rec.payload, rec.len, &m, err, sizeof err) != CMR_WIRE_OK)
            continue;
        if (m.type != CMR_MSG_METRIC_BATCH) {
            cmr_msg_free(&m);
            continue;
        }
        cmr_instr_agent_rec_t ar;
        uint64_t agent = (uint64_t)m.u.metric_batch.agent_id;
        const cmr_environment_t *env;
        if (cmr_instr_cache_agent(w->cache, agent, &ar) == 1 && ar.partition >= 0 && ar.partition < MAX_PARTITIONS &&
            w->owned[ar.partition] && (env = cmr_cfg_state_env(w->state, ar.env_id, NULL)) &&
            budget_pct_of(w, env) > 0) { /* (JVMs of environments without a budget: no window) */
            cmr_budget_window_t *win = cmr_u64map_get(&w->budget.windows, agent);
            if (!win && (win = calloc(1, sizeof *win)) && cmr_u64map_put(&w->budget.windows, agent, win) != 0) {
                free(win);
                win = NULL;
            }
            if (win)
                win->last_ms = mono_ms();
            if (win && cmr_budget_window_add(win, &m.u.metric_batch) != 0)
                cmr_budget_window_reset(win);
            if (win && win->intervals >= w->budget.intervals) {
                budget_judge(w, agent, ar.env_id, win);
                cmr_budget_window_reset(win);
            }
        }
        cmr_msg_free(&m);
    }
}

static void budget_free(budget_t *b)
{
    cmr_reader_free(b->reader);
    size_t it = 0;
    uint64_t key;
    void *val;
    while (cmr_u64map_next(&b->windows, &it, &key, &val)) {
        cmr_budget_window_free(val);
        free(val);
    }
    cmr_u64map_free(&b->windows);
    for (size_t i = 0; i < b->n_envs; i++) {
        free(b->envs[i].ids);
        cmr_u64map_free(&b->envs[i].set);
    }
    free(b->envs);
    cmr_reader_free(b->removals_reader);
}

/* --- configuration ------------------------------------------------------------------ */

static void on_config_record(worker_t *w, const cmr_reader_rec_t *rec, int live)
{
    char err[256];
    const char *id = NULL;
    int effect = cmr_cfg_state_apply(w->state, rec->payload, rec->len, &id, err, sizeof err);
    if (effect < 0)
        cmr_log(CMR_LOG_WARN, "config.bad_record", "partition=%d offset=%" PRId64 " error=\"%s\"", rec->partition,
                rec->offset, err);
    if (effect == CMR_CFG_ENV_CHANGED || effect == CMR_CFG_ENV_DELETED) {
        budget_env_t *be = budget_env(w, id);
        int64_t revision = 0;
        bool exists = cmr_cfg_state_env(w->state, id, &revision) != NULL;
        if (be && (!exists || be->revision < revision)) /* a new revision starts without removals */
            budget_env_clear(be, exists ? revision : 0);
    }
    if (effect >= 0 && live && (effect == CMR_CFG_ENV_CHANGED || effect == CMR_CFG_ENV_DELETED) && w->assigned_once) {
        char *copy = strdup(id);
        if (copy)
            run_env(w, copy);
        free(copy);
    }
}

static int drain_config(worker_t *w, int timeout_ms)
{
    cmr_reader_rec_t rec;
    int rc;
    while ((rc = cmr_reader_poll(w->config_reader, timeout_ms, &rec)) == 1) {
        on_config_record(w, &rec, cmr_reader_caught_up(w->config_reader));
        timeout_ms = 0;
    }
    return rc < 0 ? -1 : 0;
}

/* --- diagnoses (instr_diagnose.h) ------------------------------------------------------ */

static bool diag_owned(uint64_t agent, const cmr_instr_agent_rec_t *r, void *ud)
{
    (void)agent;
    const worker_t *w = ud;
    return r->partition >= 0 && r->partition < MAX_PARTITIONS && w->owned[r->partition];
}

/* Decides again the classes a diagnosis' overlay changed (instr_diagnose.h): those of
 * agents this worker owns, in one unit per agent. */
static int reconcile_changed(worker_t *w, const cmr_instr_diag_classes_t *changed)
{
    int rc = 0;
    for (size_t i = 0; i < changed->n && rc == 0; i++) {
        uint64_t agent = changed->items[i].agent;
        bool first = true; /* each agent once: its classes are listed once */
        for (size_t k = 0; k < i && first; k++)
            first = changed->items[k].agent != agent;
        cmr_instr_agent_rec_t ar;
        if (!first || cmr_instr_cache_agent(w->cache, agent, &ar) != 1 || !diag_owned(agent, &ar, w))
            continue;
        int64_t revision;
        const cmr_environment_t *env = env_of(w, ar.env_id, &revision);
        target_t t = {agent, ar.instance_id, ar.env_id, env, revision};
        class_list_t l = {0};
        cmr_instr_cache_each_class(w->cache, agent, collect_class, &l);
        unit_begin(w);
        size_t n = 0;
        for (size_t j = 0; j < l.n && rc == 0; j++) {
            if (strcmp(l.items[j].rec.instance_id, t.instance) != 0)
                continue; /* loader ids are per run */
            bool listed = false;
            for (size_t k = i; k < changed->n && !listed; k++)
                listed = changed->items[k].agent == agent && strcmp(changed->items[k].name, l.items[j].name) == 0;
            if (listed) {
                rc = reconcile(w, &t, l.items[j].loader, l.items[j].name, &l.items[j].rec);
                n++;
            }
        }
        class_list_free(&l);
        if (rc == 0)
            rc = unit_end(w);
        else
            cmr_instr_cache_rollback(w->cache);
        cmr_log(CMR_LOG_INFO, "instr.diagnosis_classes", "agent=%016" PRIx64 " classes=%zu ok=%d", agent, n, rc == 0);
    }
    return rc;
}

/* What each found method of a tree runs while the diagnosis does: the environment's own
 * probes, the anchor (roots), the conditional probes, or none and why (the class excluded,
 * its bytes unknown, the method abstract or native). Decided as the overlay will decide. */
static void mark_tree(worker_t *w, cmr_diagnosis_tree_t *t)
{
    uint64_t agent = (uint64_t)t->agent_id;
    cmr_instr_agent_rec_t ar;
    int64_t revision;
    const cmr_environment_t *env =
        cmr_instr_cache_agent(w->cache, agent, &ar) == 1 ? env_of(w, ar.env_id, &revision) : NULL;
    bool *done = calloc(t->nodes.count ? t->nodes.count : 1, sizeof *done);
    if (!done)
        return; /* the marks stay NONE: the tree is still right, only less informative */
    /* one class at a time (its metadata decoded and decided once), all its found nodes */
    for (size_t i = 0; i < t->nodes.count; i++) {
        if (done[i] || t->nodes.items[i].status != CMR_DIAG_NODE_FOUND)
            continue;
        const char *cls = t->nodes.items[i].class_name;
        uint64_t hash;
        cmr_instr_meta_t meta = {0};
        cmr_instr_decision_t d = {0};
        bool have_meta =
            cmr_instr_cache_type(w->cache, agent, cls, &hash) == 1 && cmr_instr_cache_meta(w->cache, hash, &meta) == 1;
        int rc = -1;
        if (have_meta) {
            lookup_ctx_t x = {w, agent, NULL, 0, 0};
            rc = cmr_instr_decide(env, &meta, lookup_type, &x, &d);
            lookup_done(&x);
        }
        for (size_t j = i; j < t->nodes.count; j++) {
            cmr_diag_node_t *n = &t->nodes.items[j];
            if (done[j] || n->status != CMR_DIAG_NODE_FOUND || strcmp(n->class_name, cls) != 0)
                continue;
            done[j] = true;
            const char *why = NULL;
            long mi = rc == 0 ? cmr_instr_meta_find_method(&meta, n->method_name, n->descriptor) : -1;
            bool env_picks = false;
            for (size_t k = 0; mi >= 0 && k < d.n_picks; k++)
                env_picks |= d.picks[k].method == (uint16_t)mi && d.picks[k].handoff == CMR_HANDOFF_NONE;
            if (!have_meta)
                why = "the class's metadata is not cached";
            else if (mi < 0)
                why = "the method is not in the class's metadata";
            else if (d.excluded)
                why = "the class is on the exclusion list";
            else if (meta.methods[mi].access & (0x0400 | 0x0100)) /* ACC_ABSTRACT | ACC_NATIVE */
                why = "abstract or native: no code to probe";
            else if (n->parent < 0)
                n->probe = CMR_DIAG_PROBE_ANCHOR;
            else
                n->probe = env_picks ? CMR_DIAG_PROBE_ENVIRONMENT : CMR_DIAG_PROBE_CONDITIONAL;
            char *note = why ? strdup(why) : NULL;
            if (note) {
                free(n->note);
                n->note = note;
            }
        }
        if (rc == 0)
            cmr_instr_decision_free(&d);
        if (have_meta)
            cmr_instr_meta_free(&meta);
    }
    free(done);
}

/* Asks the agent for the bytes of class `name` when it loaded that class and the cache
 * dropped them (BytecodeResend, once while the request is outstanding; the answer's bytes
 * are kept, pinned). l: the agent's classes, listed on first use. 1 asked for or still
 * awaited, 0 not needed. */
static int ask_for_bytes(worker_t *w, uint64_t agent, const char *name, class_list_t *l, bool *listed)
{
    uint64_t hash;
    if (cmr_instr_cache_type(w->cache, agent, name, &hash) != 1)
        return 0; /* never loaded by that agent: nothing to ask for */
    cmr_buf_t b = {0};
    int have = cmr_instr_cache_bytes(w->cache, hash, &b);
    cmr_buf_free(&b);
    if (have != 0)
        return 0;
    if (!*listed) {
        cmr_instr_cache_each_class(w->cache, agent, collect_class, l);
        *listed = true;
    }
    for (size_t k = 0; k < l->n; k++) {
        class_ref_t *c = &l->items[k];
        char topic[CMR_TOPIC_NAME_MAX];
        if (strcmp(c->name, name) != 0 || c->rec.hash != hash)
            continue;
        if (c->rec.resend)
            return 1; /* asked for already, not here yet */
        if (command_topic(w, c->rec.instance_id, topic, sizeof topic) != 0)
            continue;
        cmr_bytecode_resend_t r = {request_id(agent, c->loader, c->name, hash, 0, 4), (int64_t)agent, c->name,
                                   c->loader, (int64_t)hash};
        if (send_msg(w, CMR_MSG_BYTECODE_RESEND, &r, c->rec.instance_id, topic) != 0)
            return 0;
        c->rec.resend = 1; /* answered by a ClassLoaded (RESEND) */
        cmr_instr_cache_put_class(w->cache, agent, c->loader, c->name, &c->rec);
        w->resends++;
        return 1;
    }
    return 0;
}

/* Classes a tree could not read because the cache dropped their bytes (they needed no
 * instrumentation, beyond instrumenter.cache_budget_bytes): the selected method's own
 * class (the tree is an error then) and its NOT_LOADED callees. The agent is asked for
 * them, and the tree is made again once they are back. Returns how many are asked for or
 * still awaited. */
static size_t resend_unread(worker_t *w, cmr_diagnosis_tree_t *t)
{
    uint64_t agent = (uint64_t)t->agent_id;
    size_t asked = 0;
    class_list_t l = {0};
    bool listed = false;
    const cmr_diagnosis_t *d = cmr_instr_diag_get(w->diag, t->diagnosis_id);
    if (t->error[0] && d && d->class_name[0])
        asked += (size_t)ask_for_bytes(w, agent, d->class_name, &l, &listed);
    for (size_t i = 0; i < t->nodes.count; i++) {
        cmr_diag_node_t *n = &t->nodes.items[i];
        if (n->status != CMR_DIAG_NODE_NOT_LOADED || !ask_for_bytes(w, agent, n->class_name, &l, &listed))
            continue;
        asked++;
        char *note = strdup("its bytes were not kept: asked the agent for them (BytecodeResend)");
        if (note) {
            free(n->note);
            n->note = note;
        }
    }
    class_list_free(&l);
    return asked;
}

static int settle_env(const char *env_id, void *ud)
{
    worker_t *w = ud;
    for (size_t i = 0; i < w->nsettled; i++)
        if (strcmp(w->settled[i], env_id) == 0)
            return 0;
    if (w->nsettled < sizeof w->settled / sizeof w->settled[0])
        snprintf(w->settled[w->nsettled++], sizeof w->settled[0], "%s", env_id);
    run_env(w, env_id);
    return 0;
}

/* Reads what cmr.diagnoses has, then makes at most one agent's tree (bounded work per loop
 * turn) once the topic was read to its end; installs and removes the overlays. */
static int diag_step(worker_t *w)
{
    cmr_reader_rec_t rec;
    int rc;
    char err[256];
    for (int i = 0; i < 256 && (rc = cmr_reader_poll(w->diag_reader, 0, &rec)) == 1; i++)
        if (cmr_instr_diag_apply(w->diag, rec.payload, rec.len, err, sizeof err) < 0)
            cmr_log(CMR_LOG_WARN, "instr.bad_diagnosis", "partition=%d offset=%" PRId64 " error=\"%s\"", rec.partition,
                    rec.offset, err);
    if (!cmr_reader_caught_up(w->diag_reader))
        return 0;
    cmr_instr_diag_classes_t changed = {0};
    int orc = cmr_instr_diag_take_ended(w->diag, &changed);
    cmr_diagnosis_tree_t t;
    rc = cmr_instr_diag_step(w->diag, w->cache, diag_owned, w, cmr_wall_ms(), &t);
    if (rc == 1) {
        mark_tree(w, &t);
        if (resend_unread(w, &t) > 0) { /* made again once the bytes are back */
            char cerr[256];
            cmr_instr_cache_commit(w->cache, cerr, sizeof cerr);
            cmr_instr_diag_retry(w->diag, t.diagnosis_id, (uint64_t)t.agent_id, cmr_wall_ms());
        }
        size_t sent = w->sent; /* not part of a unit: the producer delivers it meanwhile */
        send_msg(w, CMR_MSG_DIAGNOSIS_TREE, &t, NULL, NULL);
        w->sent = sent;
        if (orc == 0)
            orc = cmr_instr_diag_set_overlay(w->diag, &t, &changed);
        cmr_instr_diag_tree_free(&t);
    } else if (rc == 0 && !w->diag_settled) {
        /* the trees of active diagnoses are made again: now classes left with the probes of
         * a diagnosis that ended while this worker was away get their bytes back */
        w->diag_settled = true;
        cmr_instr_diag_each_recent_env(w->diag, cmr_wall_ms() - CMR_DIAG_SETTLE_MS, settle_env, w);
    }
    if (orc == 0 && changed.n)
        orc = reconcile_changed(w, &changed);
    cmr_instr_diag_classes_free(&changed);
    return rc < 0 || orc < 0 ? -1 : 0;
}

/* --- catch-up of newly assigned partitions ------------------------------------------ */

/* A catch-up is waiting or under way. Configuration changes wait for it to end: an
 * environment run reaches only owned partitions, and it records its revision as done for
 * all, so a change applied while a partition catches up would never reach that
 * partition's agents. After the take-over, the change runs against every owned partition,
 * the new one included (its replayed records were decided with the configuration they
 * were answered with). */
static bool catch_up_busy(const worker_t *w)
{
    if (w->catch_up.reader)
        return true;
    for (int32_t p = 0; p < MAX_PARTITIONS; p++)
        if (w->catch_up.state[p] != CATCH_UP_NONE)
            return true;
    return false;
}

/* The partition is this worker's now: environment runs include it, its records flow. A
 * partition that cannot be resumed (logged by the transport) waits for the next round. */
static void take_over(worker_t *w, int32_t partition)
{
    assert(partition >= 0 && partition < MAX_PARTITIONS);
    cmr_partition_t part = {cmr_topic_name(CMR_TOPIC_CLASSES), partition, CMR_OFFSET_INVALID};
    if (cmr_consumer_resume(w->consumer, &part, 1) != 0) {
        cmr_log(CMR_LOG_ERROR, "instr.resume_failed", "partition=%d retry=next_round", partition);
        w->catch_up.state[partition] = CATCH_UP_WAITING;
        return;
    }
    w->catch_up.state[partition] = CATCH_UP_NONE;
    w->owned[partition] = 1;
    cmr_log(CMR_LOG_INFO, "instr.partition_live", "partition=%d", partition); /* its records are answered from here */
    w->assigned_once = 1;
    w->envs_checked = 0;            /* environments changed meanwhile are run against it too */
    if (w->lost_at_ms[partition]) { /* records lost in its catch-up */
        resync_ctx_t x = {w, partition};
        cmr_instr_cache_each_agent(w->cache, resync_agent, &x);
    }
}

static void range_taken_over(worker_t *w, catch_up_range_t *cr, int ok)
{
    cr->taken = true;
    cmr_log(CMR_LOG_INFO, "instr.partition_caught_up",
            "partition=%d from=%" PRId64 " until=%" PRId64 " records=%" PRId64 " ok=%d", cr->range.partition,
            cr->range.from, cr->range.until, cr->records, ok);
    take_over(w, cr->range.partition);
}

/* Ends the round: partitions still in it are taken over (ok when their range is done and
 * nothing failed), revoked ones are forgotten. */
static void catch_up_end(worker_t *w, int ok)
{
    catch_up_t *cu = &w->catch_up;
    for (size_t i = 0; i < cu->n; i++) {
        int32_t p = cu->ranges[i].range.partition;
        if (cu->state[p] == CATCH_UP_RUNNING)
            range_taken_over(w, &cu->ranges[i], ok && cu->reader && cmr_reader_partition_done(cu->reader, p));
    }
    cmr_reader_free(cu->reader);
    free(cu->ranges);
    cu->reader = NULL;
    cu->ranges = NULL;
    cu->n = 0;
}

/* Starts a round for the partitions waiting (assigned since the last round): their
 * committed offsets, and a range reader over what lies between this cache's last offset
 * and the committed one. Partitions with nothing to read are taken over at once. */
static void catch_up_start(worker_t *w)
{
    catch_up_t *cu = &w->catch_up;
    assert(!cu->reader && cu->n == 0);
    size_t n = 0;
    for (int32_t p = 0; p < MAX_PARTITIONS; p++)
        n += cu->state[p] == CATCH_UP_WAITING;
    if (n == 0)
        return;
    cmr_partition_t *parts = calloc(n, sizeof *parts);
    cmr_reader_range_t *ranges = calloc(n, sizeof *ranges);
    cu->ranges = calloc(n, sizeof *cu->ranges);
    if (!parts || !ranges || !cu->ranges)
        goto out; /* tried again in the next round */
    n = 0;
    for (int32_t p = 0; p < MAX_PARTITIONS; p++)
        if (cu->state[p] == CATCH_UP_WAITING)
            parts[n++] = (cmr_partition_t){cmr_topic_name(CMR_TOPIC_CLASSES), p, CMR_OFFSET_INVALID};
    if (cmr_consumer_committed(w->consumer, parts, n, 10000) != 0) {
        cmr_log(CMR_LOG_WARN, "instr.catch_up_failed", "reason=\"committed offsets unavailable\"");
        for (size_t i = 0; i < n; i++)
            take_over(w, parts[i].partition);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        int64_t seen = -1;
        cmr_instr_cache_offset(w->cache, parts[i].partition, &seen);
        if (parts[i].offset >= 0 && seen + 1 < parts[i].offset) {
            ranges[cu->n] = (cmr_reader_range_t){parts[i].partition, seen + 1, parts[i].offset};
            cu->ranges[cu->n] = (catch_up_range_t){.range = ranges[cu->n]};
            cu->n++;
            cu->state[parts[i].partition] = CATCH_UP_RUNNING;
        } else {
            take_over(w, parts[i].partition);
        }
    }
    if (cu->n > 0) {
        char err[256];
        cu->reader = cmr_reader_new_ranges(w->conf, cmr_topic_name(CMR_TOPIC_CLASSES), ranges, cu->n, err, sizeof err);
        cu->deadline_ms = cmr_mono_ms() + CATCH_UP_TIMEOUT_MS;
        if (!cu->reader) {
            cmr_log(CMR_LOG_WARN, "instr.catch_up_failed", "reason=\"%s\"", err);
            catch_up_end(w, 0);
        }
    }
out:
    if (!cu->reader) {
        free(cu->ranges);
        cu->ranges = NULL;
        cu->n = 0;
    }
    free(parts);
    free(ranges);
}

/* Feeds one record into the cache without sending anything: the worker that owned the
 * partition before answered it. */
static int replay_record(worker_t *w, catch_up_range_t *cr, const cmr_reader_rec_t *rec)
{
    cmr_msg_t msg;
    int rc = 0;
    const char *topic = cmr_topic_name(CMR_TOPIC_CLASSES);
    if (cmr_reject_decode(topic, rec->partition, rec->offset, rec->payload, rec->len, &msg) == 0) {
        if (msg.type == CMR_MSG_CLASS_LOADED)
            rc = on_class(w, &msg.u.class_loaded, rec->partition);
        else
            cmr_reject(topic, "unexpected_type", rec->partition, rec->offset, cmr_msg_type_name(msg.type));
        cmr_msg_free(&msg);
    }
    see_offset(w, rec->partition, rec->offset);
    cr->records++;
    return rc;
}

static catch_up_range_t *range_of(catch_up_t *cu, int32_t partition)
{
    for (size_t i = 0; i < cu->n; i++)
        if (cu->ranges[i].range.partition == partition)
            return &cu->ranges[i];
    return NULL;
}

/* One bounded step of the round: up to CATCH_UP_STEP records (or CATCH_UP_STEP_MS), then
 * the cache is committed, so that live units never share a batch with the catch-up.
 * Partitions revoked meanwhile are dropped; those whose range is done are taken over. */
static void catch_up_step(worker_t *w)
{
    catch_up_t *cu = &w->catch_up;
    for (size_t i = 0; i < cu->n; i++)
        if (cu->state[cu->ranges[i].range.partition] != CATCH_UP_RUNNING && !cu->ranges[i].dropped &&
            !cu->ranges[i].taken) {
            cu->ranges[i].dropped = true;
            cmr_reader_drop(cu->reader, cu->ranges[i].range.partition);
            cmr_log(CMR_LOG_INFO, "instr.catch_up_dropped", "partition=%d records=%" PRId64 " reason=revoked",
                    cu->ranges[i].range.partition, cu->ranges[i].records);
        }
    int64_t step_end = cmr_mono_ms() + CATCH_UP_STEP_MS;
    cmr_reader_rec_t rec;
    int rc = 0, got = 0, n = 0;
    w->replaying = 1;
    while (rc == 0 && got >= 0 && n < CATCH_UP_STEP && !cmr_reader_caught_up(cu->reader) && cmr_mono_ms() < step_end) {
        got = cmr_reader_poll(cu->reader, 20, &rec);
        catch_up_range_t *cr = got == 1 ? range_of(cu, rec.partition) : NULL;
        if (cr && cu->state[rec.partition] == CATCH_UP_RUNNING) {
            rc = replay_record(w, cr, &rec);
            n++;
        }
    }
    w->replaying = 0;
    char err[256];
    if (rc == 0)
        rc = cmr_instr_cache_commit(w->cache, err, sizeof err);
    else
        cmr_instr_cache_rollback(w->cache);
    if (rc != 0 || got < 0 || cmr_mono_ms() > cu->deadline_ms) {
        catch_up_end(w, 0); /* given up: the partitions are taken over as they are */
        return;
    }
    for (size_t i = 0; i < cu->n; i++) {
        int32_t p = cu->ranges[i].range.partition;
        if (cu->state[p] == CATCH_UP_RUNNING && cmr_reader_partition_done(cu->reader, p))
            range_taken_over(w, &cu->ranges[i], 1); /* state NONE from here on */
    }
    if (cmr_reader_caught_up(cu->reader))
        catch_up_end(w, 1);
}

/* The catch-up's part of the worker loop: one step of the round in progress, or a new
 * round for the partitions assigned since. */
static void catch_up_run(worker_t *w)
{
    if (w->catch_up.reader)
        catch_up_step(w);
    else
        catch_up_start(w);
}

/* Called inside cmr_consumer_poll(): records the change and returns, waiting for nothing.
 * New partitions are paused until their catch-up is done (catch_up_run()); a revoked one
 * leaves the catch-up in progress (its records are no longer fed in). */
static void on_rebalance(cmr_consumer_t *c, int revoked, const cmr_partition_t *parts, size_t n, void *opaque)
{
    worker_t *w = opaque;
    for (size_t i = 0; i < n; i++) {
        int32_t p = parts[i].partition;
        if (p < 0 || p >= MAX_PARTITIONS)
            continue;    /* not tracked: consumed without catch-up */
        w->owned[p] = 0; /* an assigned partition is owned once caught up */
        w->catch_up.state[p] = revoked ? CATCH_UP_NONE : CATCH_UP_WAITING;
        if (!revoked && cmr_consumer_pause(c, &parts[i], 1) != 0)
            cmr_log(CMR_LOG_ERROR, "instr.pause_failed", "partition=%d", p);
    }
    cmr_log(CMR_LOG_INFO, revoked ? "instr.partitions_revoked" : "instr.partitions_assigned", "count=%zu", n);
}

/* --- setup and loop ----------------------------------------------------------------- */

static int setup(worker_t *w, const cmr_conf_t *conf, char *err, size_t errlen)
{
    int64_t budget, sync;
    w->conf = conf;
    if (cmr_conf_get_int(conf, "instrumenter.cache_budget_bytes", 256ll << 20, 0, INT64_MAX, &budget, err, errlen) != 0)
        return -1;
    bool b;
    if (cmr_conf_get_bool(conf, "instrumenter.sync", false, &b, err, errlen) != 0)
        return -1;
    sync = b;
    if (cmr_conf_get_int(conf, "trust.grant.lifetime.ms", 604800000, 0, CMR_GRANT_MAX_LIFETIME_MS,
                         &w->grant_lifetime_ms, err, errlen) != 0)
        return -1;
    int64_t ahead_bytes;
    if (cmr_conf_get_int(conf, "instrumenter.ahead.max_bytes", 64ll << 20, 0, INT64_C(1) << 40, &ahead_bytes, err,
                         errlen) != 0 ||
        cmr_conf_get_int(conf, "instrumenter.ahead.max_bytes_per_jvm", 16ll << 20, 1, INT64_C(1) << 40,
                         &w->ahead_jvm_bytes, err, errlen) != 0)
        return -1;
    if (ahead_bytes > 0 && w->grant_lifetime_ms > 0 && !(w->ahead = cmr_instr_ahead_new((size_t)ahead_bytes))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int64_t threads;
    if (cmr_conf_get_int(conf, "instrumenter.threads",
                         cpus < 1   ? 1
                         : cpus > 8 ? 8
                                    : cpus,
                         1, CMR_WORKPOOL_MAX_THREADS + 1, &threads, err, errlen) != 0)
        return -1;
    w->pool = cmr_workpool_new((int)threads - 1); /* the worker's own thread prepares too */
    w->jobs = calloc(JOBS_MAX, sizeof *w->jobs);
    if (!w->pool || !w->jobs) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    const char *path = cmr_conf_get(conf, "instrumenter.db", "/var/lib/cmr/instrumenter");
    w->cache = cmr_instr_cache_open(path, (uint64_t)budget, (int)sync, err, errlen);
    if (!w->cache)
        return -1;
    w->state = cmr_cfg_state_new();
    if (!(w->readers = cmr_reader_client_new(conf, err, errlen)))
        return -1;
    w->config_reader = cmr_reader_open(w->readers, cmr_topic_name(CMR_TOPIC_CONFIG), 0, err, errlen);
    if (!w->state || !w->config_reader)
        return -1;
    w->registry_reader = cmr_reader_open(w->readers, cmr_topic_name(CMR_TOPIC_REGISTRATIONS), 0, err, errlen);
    if (!w->registry_reader)
        return -1;
    w->diag = cmr_instr_diag_new();
    const cmr_topic_t diag_topics[2] = {CMR_TOPIC_DIAGNOSES, CMR_TOPIC_DIAGNOSIS_TREES};
    for (int i = 0; i < 2; i++) {
        const cmr_topic_layout_t *l = cmr_topic_layout(diag_topics[i]);
        if (cmr_admin_ensure_topic(conf, cmr_topic_name(diag_topics[i]), l->partitions, -1, l->compacted, 15000, err,
                                   errlen) != 0)
            cmr_log(CMR_LOG_WARN, "instr.topic_missing", "topic=%s error=\"%s\"", cmr_topic_name(diag_topics[i]), err);
    }
    w->diag_reader = cmr_reader_open(w->readers, cmr_topic_name(CMR_TOPIC_DIAGNOSES), 0, err, errlen);
    if (!w->diag || !w->diag_reader)
        return -1;
    /* the overhead budget's removals (read even with the budget off here: another worker's
     * removals still hold for the JVMs of this one) */
    const cmr_topic_layout_t *bl = cmr_topic_layout(CMR_TOPIC_BUDGET);
    if (cmr_admin_ensure_topic(conf, cmr_topic_name(CMR_TOPIC_BUDGET), bl->partitions, -1, bl->compacted, 15000, err,
                               errlen) != 0)
        cmr_log(CMR_LOG_WARN, "instr.topic_missing", "topic=%s error=\"%s\"", cmr_topic_name(CMR_TOPIC_BUDGET), err);
    w->budget.removals_reader = cmr_reader_open(w->readers, cmr_topic_name(CMR_TOPIC_BUDGET), 0, err, errlen);
    if (!w->budget.removals_reader)
        return -1;
    /* the classes granted ahead that the workers published */
    if (w->ahead) {
        const cmr_topic_layout_t *gl = cmr_topic_layout(CMR_TOPIC_GRANTS);
        if (cmr_admin_ensure_topic(conf, cmr_topic_name(CMR_TOPIC_GRANTS), gl->partitions, -1, gl->compacted, 15000,
                                   err, errlen) != 0)
            cmr_log(CMR_LOG_WARN, "instr.topic_missing", "topic=%s error=\"%s\"", cmr_topic_name(CMR_TOPIC_GRANTS),
                    err);
        w->grants_reader = cmr_reader_open(w->readers, cmr_topic_name(CMR_TOPIC_GRANTS), 0, err, errlen);
        if (!w->grants_reader)
            return -1;
    }
    w->pconf = cmr_conf_dup(conf);
    if (!w->pconf)
        return -1;
    if (!cmr_conf_get(conf, "kafka.linger.ms", NULL))
        cmr_conf_set(w->pconf, "kafka.linger.ms", "1", "cmr-instrumenter default");
    w->producer = cmr_producer_new(w->pconf, "cmr-instrumenter", NULL, NULL, err, errlen);
    if (!w->producer)
        return -1;
    /* the partition count of cmr.classes, from the cluster's metadata */
    w->classes_partitions = cmr_producer_partitions(w->producer, cmr_topic_name(CMR_TOPIC_CLASSES), 5000);
    if (w->classes_partitions <= 0)
        cmr_log(CMR_LOG_WARN, "instr.classes_partitions_unknown",
                "action=\"after lost class records, only the agents seen since are asked again\"");
    warm_topic(w, cmr_topic_name(CMR_TOPIC_METHODS));
    warm_topic(w, cmr_topic_name(CMR_TOPIC_DIAGNOSIS_TREES));
    return 0;
}

static void teardown(worker_t *w)
{
    cmr_reader_free(w->catch_up.reader);
    free(w->catch_up.ranges);
    if (w->consumer)
        cmr_consumer_close(w->consumer);
    if (w->producer)
        cmr_producer_destroy(w->producer, 5000);
    cmr_conf_destroy(w->pconf);
    cmr_reader_free(w->config_reader);
    cmr_cfg_state_free(w->state);
    cmr_reader_free(w->diag_reader);
    cmr_reader_free(w->registry_reader);
    cmr_reader_free(w->grants_reader);
    registered_free(w);
    cmr_reader_client_free(w->readers); /* after its readers (budget_free ran before) */
    cmr_instr_diag_free(w->diag);
    cmr_instr_cache_close(w->cache);
    cmr_topic_set_free(&w->topics_ok);
    cmr_signer_free(w->signer);
    cmr_verifier_free(w->own_key);
    cmr_instr_ahead_free(w->ahead);
    if (w->jobs)
        jobs_discard(w);
    free(w->jobs);
    cmr_workpool_free(w->pool);
}

static int catch_up(worker_t *w, int64_t timeout_ms)
{
    int64_t deadline = mono_ms() + timeout_ms;
    while (!cmr_reader_caught_up(w->config_reader)) {
        if (mono_ms() > deadline) {
            cmr_log(CMR_LOG_ERROR, "instr.catch_up_timeout", "topic=%s", cmr_topic_name(CMR_TOPIC_CONFIG));
            return -1;
        }
        if (drain_config(w, 200) != 0)
            return -1;
    }
    /* the overhead budget's removals, before the first class is answered */
    while (!budget_read_removals(w, 4096, 100, false)) {
        if (mono_ms() > deadline) {
            cmr_log(CMR_LOG_ERROR, "instr.catch_up_timeout", "topic=%s", cmr_topic_name(CMR_TOPIC_BUDGET));
            return -1;
        }
    }
    /* the classes granted ahead, before the first JVM is answered; a topic too large to
     * read in GRANTS_CATCH_UP_MS goes on being read in the loop (the first JVMs may then get
     * fewer classes ahead): it never keeps the worker from starting */
    int64_t grants_until = mono_ms() + GRANTS_CATCH_UP_MS;
    while (!grants_step(w, 4096, 100)) {
        if (mono_ms() > grants_until || mono_ms() > deadline) {
            cmr_log(CMR_LOG_WARN, "instr.grants_partial",
                    "topic=%s read_ms=%d action=\"the rest is read while the worker runs\"",
                    cmr_topic_name(CMR_TOPIC_GRANTS), GRANTS_CATCH_UP_MS);
            break;
        }
    }
    /* the registrations too, so that the first lost records find their agents */
    while (!cmr_reader_caught_up(w->registry_reader) && mono_ms() < deadline)
        drain_registrations(w, 1024, 100);
    drain_registrations(w, 1 << 30, 0);
    cmr_log(CMR_LOG_INFO, "instr.config_loaded",
            "environments=%zu registered_agents=%zu budget_removals=%" PRIu64 " budget_refused=%" PRIu64,
            cmr_cfg_state_env_count(w->state), cmr_u64map_count(&w->registered), atomic_load(&w->budget.restored),
            atomic_load(&w->budget.refused));
    return 0;
}

#define UNIT_MAX 1024

/* One unit of records: processed together, delivered and committed together, then
 * marked done in the order they were received. */
typedef struct unit {
    cmr_record_t *recs[UNIT_MAX];
    size_t n;
} unit_t;

static int process_unit(worker_t *w, unit_t *u)
{
    int64_t t0 = mono_ms();
    uint64_t prepare_before = atomic_load(&w->prepare_us);
    unit_begin(w);
    for (size_t i = 0; i < u->n; i++) {
        cmr_record_t *rec = u->recs[i];
        if (rec->msg.type != CMR_MSG_CLASS_LOADED) {
            cmr_log(CMR_LOG_WARN, "instr.foreign_message", "topic=%s partition=%d offset=%" PRId64 " type=%s",
                    rec->topic, rec->partition, rec->offset, cmr_msg_type_name(rec->msg.type));
            see_offset(w, rec->partition, rec->offset);
            continue;
        }
        see_offset(w, rec->partition, rec->offset);
        if (on_class(w, &rec->msg.u.class_loaded, rec->partition) != 0) {
            jobs_discard(w);
            cmr_instr_cache_rollback(w->cache);
            return -1;
        }
    }
    if (jobs_flush(w) != 0) {
        cmr_instr_cache_rollback(w->cache);
        return -1;
    }
    int64_t t1 = mono_ms();
    int rc = unit_end(w);
    cmr_log(CMR_LOG_DEBUG, "instr.unit",
            "records=%zu messages=%zu process_ms=%" PRId64 " prepare_us=%" PRIu64 " deliver_commit_ms=%" PRId64, u->n,
            w->sent, t1 - t0, atomic_load(&w->prepare_us) - prepare_before, mono_ms() - t1);
    return rc;
}

/* Fills a unit: waits up to 50 ms for the first record, then takes what is already there. */
static int fill_unit(worker_t *w, unit_t *u)
{
    u->n = 0;
    cmr_record_t *rec;
    int got = cmr_consumer_poll(w->consumer, 50, &rec);
    while (got == 1) {
        u->recs[u->n++] = rec;
        if (u->n == UNIT_MAX)
            break;
        got = cmr_consumer_poll(w->consumer, 0, &rec);
    }
    return got < 0 ? -1 : 0;
}

/* Processes a unit until it is done (a failed unit is rolled back and processed again). */
static void run_unit(worker_t *w, unit_t *u, volatile sig_atomic_t *stop)
{
    if (u->n == 0)
        return;
    while (!*stop && process_unit(w, u) != 0)
        sleep(1);
    for (size_t i = 0; i < u->n; i++) {
        if (!*stop)
            cmr_consumer_done(w->consumer, u->recs[i]);
        cmr_record_free(u->recs[i]);
    }
    u->n = 0;
}

/* GET /metrics (on a server thread): the worker's atomic counters only. */
static void metrics_fill(cmr_buf_t *out, void *opaque)
{
    worker_t *w = opaque;
    const cmr_prom_row_t rows[] = {
        {"cmr_instrumenter_classes_total", "counter", "ClassLoaded messages processed", atomic_load(&w->classes)},
        {"cmr_instrumenter_redefines_total", "counter", "Redefine commands sent", atomic_load(&w->redefines)},
        {"cmr_instrumenter_resends_total", "counter", "BytecodeResend commands sent", atomic_load(&w->resends)},
        {"cmr_instrumenter_restores_total", "counter", "Redefine commands restoring original bytes",
         atomic_load(&w->originals)},
        {"cmr_instrumenter_cached_at_agent_total", "counter",
         "Redefines not sent: the agent already runs those instrumented bytes (its cache of instrumented classes)",
         atomic_load(&w->cached_at_agent)},
        {"cmr_instrumenter_ahead_jvms_total", "counter",
         "New JVMs sent the classes of their environment ahead of their load (ClassGrants)",
         atomic_load(&w->ahead_sets)},
        {"cmr_instrumenter_ahead_classes_total", "counter", "Classes sent ahead of their load, all JVMs",
         atomic_load(&w->ahead_classes)},
        {"cmr_instrumenter_grants_renewed_total", "counter",
         "Class grants renewed (signed again for the same bytes) before they were sent ahead, less than a day of "
         "their validity left",
         atomic_load(&w->ahead_renewed)},
        {"cmr_instrumenter_ahead_unread_jvms_total", "counter",
         "New JVMs sent no classes ahead: their agent does not read ClassGrants (from before them, or "
         "agent.preload.max.bytes 0)",
         atomic_load(&w->ahead_unread)},
        {"cmr_instrumenter_grants_published_total", "counter",
         "Class grants this worker wrote to cmr.grants (new, renewed or for other bytes)",
         atomic_load(&w->ahead_published)},
        {"cmr_instrumenter_grants_read_total", "counter", "Records of cmr.grants read into the classes granted ahead",
         atomic_load(&w->ahead_read)},
        {"cmr_instrumenter_grants_refused_total", "counter",
         "Records of cmr.grants refused (not one class, another key, bytes that do not match the grant)",
         atomic_load(&w->ahead_refused)},
        {"cmr_instrumenter_hash_mismatch_total", "counter", "ClassLoaded refused: bytes do not hash to class_hash",
         atomic_load(&w->hash_mismatch)},
        {"cmr_instrumenter_budget_removed_total", "counter",
         "Methods the overhead budget took the probes of (their probes cost more than they measure)",
         atomic_load(&w->budget.removed)},
        {"cmr_instrumenter_budget_restored_total", "counter",
         "Removals of the overhead budget read from cmr.budget (written before a restart, or by other workers)",
         atomic_load(&w->budget.restored)},
        {"cmr_instrumenter_budget_refused_total", "counter",
         "Records of cmr.budget refused (malformed, or past the bound of removals per environment)",
         atomic_load(&w->budget.refused)},
        {"cmr_instrumenter_class_records_lost_total", "counter",
         "Records of cmr.classes this worker never read (deleted before it got to them, or malformed)",
         atomic_load(&w->records_lost)},
        {"cmr_instrumenter_class_resyncs_total", "counter",
         "Agents asked for all their classes again after records of their partition were lost",
         atomic_load(&w->resyncs)},
        {"cmr_instrumenter_prepared_total", "counter",
         "New classes instrumented, digested and signed on the pool of instrumenter.threads",
         atomic_load(&w->prepared)},
        {"cmr_instrumenter_trivial_skipped_total", "counter",
         "Methods a sensor assignment matched but left out as trivial (accessors, tiny leaves; trivial: true forces "
         "them)",
         atomic_load(&w->trivial)},
    };
    cmr_prom_rows(out, rows, sizeof rows / sizeof rows[0]);
    cmr_prom_family(out, "cmr_instrumenter_prepare_seconds_total", "counter",
                    "Time the worker's thread spent preparing new classes or waiting for the pool to");
    cmr_prom_sample_double(out, "cmr_instrumenter_prepare_seconds_total", NULL, 0,
                           (double)atomic_load(&w->prepare_us) / 1e6);
    cmr_lag_gauge_write(&w->lag, out);
}

/* A number in [0, max] (a configuration error, on stderr, otherwise). */
static int conf_number(const cmr_conf_t *conf, const char *key, const char *def, double max, double *out)
{
    const char *v = cmr_conf_get(conf, key, def);
    char *end;
    *out = strtod(v, &end);
    if (end == v || *end != '\0' || !(*out >= 0 && *out <= max)) {
        fprintf(stderr, "cmr-instrumenter: %s = \"%s\" is not a number in 0..%g\n", key, v, max);
        return -1;
    }
    return 0;
}

int cmr_instr_worker_run(const cmr_conf_t *conf, volatile sig_atomic_t *stop)
{
    worker_t w = {0};
    cmr_lag_gauge_init(&w.lag, cmr_conf_get(conf, "instrumenter.group", "cmr-instrumenter"));
    char err[512] = "";
    int64_t timeout;
    int rc = 1;
    int64_t budget;
    bool sync;
    if (cmr_conf_get_int(conf, "instrumenter.catchup_timeout_ms", 60000, 1000, 3600000, &timeout, err, sizeof err) !=
            0 ||
        cmr_conf_get_int(conf, "instrumenter.cache_budget_bytes", 256ll << 20, 0, INT64_MAX, &budget, err,
                         sizeof err) != 0 ||
        cmr_conf_get_bool(conf, "instrumenter.sync", false, &sync, err, sizeof err) != 0 ||
        cmr_conf_get_int(conf, "instrumenter.budget.intervals", 3, 1, 1000, &w.budget.intervals, err, sizeof err) !=
            0) {
        fprintf(stderr, "cmr-instrumenter: %s\n", err); /* a configuration error: exit status 2 */
        return 2;
    }
    if (conf_number(conf, "instrumenter.budget.pct", "3", 100, &w.budget.pct) != 0 ||
        conf_number(conf, "instrumenter.budget.probe_ns", "50", 1e6, &w.budget.probe_ns) != 0)
        return 2;
    w.signer = cmr_command_signer_load(conf, "cmr-instrumenter", "instr.signing_key",
                                       &w.lifetime_ms); /* before connecting to anything */
    if (!w.signer)
        return 2;
    cmr_metrics_http_t *metrics = NULL;
    if (cmr_metrics_http_start(conf, metrics_fill, &w, &metrics, err, sizeof err) != 0) {
        cmr_log(CMR_LOG_ERROR, "instr.start_failed", "error=\"%s\"", err);
        cmr_signer_free(w.signer);
        return 2;
    }
    if (setup(&w, conf, err, sizeof err) != 0) {
        cmr_log(CMR_LOG_ERROR, "instr.start_failed", "error=\"%s\"", err);
        goto out;
    }
    /* from now: what JVMs measure from here on (opened before the first poll of the
     * readers' client: see cmr_reader_open) */
    /* (also with instrumenter.budget.pct 0: an environment may set a budget of its own) */
    if (w.budget.probe_ns > 0 && !(w.budget.reader = cmr_reader_open(w.readers, cmr_topic_name(CMR_TOPIC_METRICS),
                                                                     cmr_wall_ms(), err, sizeof err)))
        cmr_log(CMR_LOG_WARN, "instr.budget_off", "error=\"%s\"", err);
    if (catch_up(&w, timeout) != 0)
        goto out;
    const char *topics[] = {cmr_topic_name(CMR_TOPIC_CLASSES)};
    const char *group = cmr_conf_get(conf, "instrumenter.group", "cmr-instrumenter");
    w.consumer = cmr_consumer_new(conf, group, topics, 1, on_rebalance, &w, err, sizeof err);
    if (!w.consumer) {
        cmr_log(CMR_LOG_ERROR, "instr.start_failed", "error=\"%s\"", err);
        goto out;
    }
    cmr_log(CMR_LOG_INFO, "instr.started", "group=%s", group);
    int64_t last_summary = mono_ms();
    while (!*stop) {
        cmr_lag_gauge_refresh(&w.lag, w.consumer);
        if (mono_ms() - last_summary >= 10000) { /* rejected messages, per topic and reason */
            cmr_rejects_log_summary();
            last_summary = mono_ms();
        }
        if (!catch_up_busy(&w) && drain_config(&w, 0) != 0)
            goto out;
        drain_registrations(&w, 256, 0);
        if (!w.replaying)
            resync_step(&w);
        catch_up_run(&w);
        if (w.assigned_once && !w.envs_checked) {
            w.envs_checked = 1;
            run_pending_envs(&w);
        }
        if (w.assigned_once && !catch_up_busy(&w) && diag_step(&w) != 0)
            goto out;
        if (w.assigned_once && !catch_up_busy(&w))
            budget_step(&w);
        grants_step(&w, 256, 0);
        static unit_t unit;
        int rc_fill = fill_unit(&w, &unit);
        run_unit(&w, &unit, stop);
        if (rc_fill < 0)
            goto out;
    }
    rc = 0;
out:
    cmr_log(CMR_LOG_INFO, "instr.stopped",
            "classes=%" PRIu64 " redefined=%" PRIu64 " resend=%" PRIu64 " restored=%" PRIu64 " hash_mismatch=%" PRIu64
            " class_records_lost=%" PRIu64 " resyncs=%" PRIu64 " cached_at_agent=%" PRIu64 " ahead_jvms=%" PRIu64
            " ahead_classes=%" PRIu64 " ahead_unread_jvms=%" PRIu64,
            atomic_load(&w.classes), atomic_load(&w.redefines), atomic_load(&w.resends), atomic_load(&w.originals),
            atomic_load(&w.hash_mismatch), atomic_load(&w.records_lost), atomic_load(&w.resyncs),
            atomic_load(&w.cached_at_agent), atomic_load(&w.ahead_sets), atomic_load(&w.ahead_classes),
            atomic_load(&w.ahead_unread));
    cmr_rejects_log_summary();
    cmr_metrics_http_stop(metrics); /* before w goes: its thread reads w */
    budget_free(&w.budget);
    cmr_u64map_free(&w.resynced);
    teardown(&w);
    cmr_lag_gauge_free(&w.lag);
    return rc;
}
