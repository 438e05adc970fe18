/*
 * ing_agents.c - agent status over time: the AgentStatus messages of cmr.agent-events
 * (state, environment and revision, classes seen / sent / instrumented, events recorded
 * and dropped, redefinition failures, commands accepted and refused), kept in the meta
 * store and listed for operators: the latest per JVM, or one JVM's history.
 *
 * Stored in the meta store's `status` column family: agent id (8, big endian) | time ms
 * (8, ordered) -> the message as received (Avro single-object encoding). Agents report
 * every agent.status.interval.ms. The first status of each minute (and every change of
 * state) is kept; within the minute, the newest status replaces the one before it, so the
 * list of agents always shows the newest counters and a JVM costs at most 2,880 entries a
 * day.
 * Every worker reads the whole topic (like cmr.registrations), so every meta store has
 * every agent. Retention: entries older than ingest.retention.age_ms are deleted with one
 * range deletion per agent.
 *
 * Ownership: the `last` map (agent id -> status_last_t, malloc'd; freed by
 * cmr_ingest_status_forget) belongs to the engine;
 * query results are malloc'd for the caller.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <rocksdb/c.h>

#include "cmr/buf.h"
#include "cmr/bytes.h"
#include "cmr/clock.h"
#include "cmr/ingest.h"
#include "cmr/json.h"
#include "cmr/wire.h"

#define STATUS_CF 2         /* meta column family index of `status` (cmr_store_cf) */
#define KEEP_EVERY_MS 60000 /* an unchanged state is kept once a minute */
#define MAX_AGENTS 200000   /* agents whose status is kept */

static void status_key(uint8_t k[16], uint64_t agent, int64_t time_ms)
{
    cmr_put_be64(k, agent);
    cmr_put_be64_ordered(k + 8, time_ms);
}

/* What the engine remembers of an agent's stored statuses (the `last` map's value). */
typedef struct status_last {
    int64_t anchor_ms; /* the status that starts the current minute (kept) */
    int64_t latest_ms; /* the newest one (replaced by the next within the minute) */
    int state;
} status_last_t;

int cmr_ingest_status_add(cmr_store_t *meta, void *writebatch, cmr_u64map_t *last, const cmr_agent_status_t *st,
                          const void *payload, size_t len)
{
    if (st->agent_id == 0 || st->time_ms <= 0)
        return 0; /* before the agent had an id: nothing to file it under */
    uint64_t agent = (uint64_t)st->agent_id;
    status_last_t *prev = cmr_u64map_get(last, agent);
    if (!prev) {
        if (cmr_u64map_count(last) >= MAX_AGENTS || !(prev = calloc(1, sizeof *prev)))
            return 0; /* agent ids are claims: a flood of new ones is not kept */
        if (cmr_u64map_put(last, agent, prev) != 0) {
            free(prev);
            return 0;
        }
        prev->anchor_ms = prev->latest_ms = INT64_MIN;
    }
    bool same = prev->latest_ms != INT64_MIN && prev->state == (int)st->state;
    if (same && st->time_ms <= prev->latest_ms)
        return 0; /* older than what is kept (or a replay of it) */
    uint8_t k[16];
    void *cf = cmr_store_cf(meta, STATUS_CF);
    if (same && st->time_ms - prev->anchor_ms < KEEP_EVERY_MS) {
        if (prev->latest_ms != prev->anchor_ms) { /* the newest replaces the one before */
            status_key(k, agent, prev->latest_ms);
            rocksdb_writebatch_delete_cf(writebatch, cf, (const char *)k, sizeof k);
        }
    } else {
        prev->anchor_ms = st->time_ms;
    }
    prev->latest_ms = st->time_ms;
    prev->state = (int)st->state;
    status_key(k, agent, st->time_ms);
    rocksdb_writebatch_put_cf(writebatch, cf, (const char *)k, sizeof k, payload, len);
    return 1;
}

void cmr_ingest_status_forget(cmr_u64map_t *last)
{
    size_t it = 0;
    uint64_t agent;
    void *v;
    while (cmr_u64map_next(last, &it, &agent, &v))
        free(v);
    cmr_u64map_free(last);
}

void cmr_ingest_status_retention(cmr_store_t *meta, const cmr_u64map_t *last, int64_t cutoff_ms)
{
    size_t it = 0;
    uint64_t agent;
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    while (cmr_u64map_next(last, &it, &agent, NULL)) {
        uint8_t from[16], to[16];
        status_key(from, agent, INT64_MIN);
        status_key(to, agent, cutoff_ms);
        rocksdb_writebatch_delete_range_cf(wb, cmr_store_cf(meta, STATUS_CF), (const char *)from, 16, (const char *)to,
                                           16);
    }
    char err[256];
    cmr_store_write(meta, wb, err, sizeof err);
    rocksdb_writebatch_destroy(wb);
}

/* --- queries ----------------------------------------------------------------------------- */

static const char *const state_names[] = {"MINIMAL",     "FULL",           "DISCONNECTED",
                                          "RECONNECTED", "NO_ENVIRONMENT", "SHUTDOWN"};

static int64_t refused_total(const cmr_agent_status_t *s)
{
    int64_t n = 0;
    for (size_t i = 0; i < s->commands_refused.count; i++)
        n += s->commands_refused.items[i].count;
    return n;
}

static const char *const diag_end_names[] = {"none",   "stopped",        "time_to_live",    "hits",
                                             "budget", "back_to_normal", "environment_gone"};

/* The end reason of a diagnosis in a JVM: "cmr" when the CMR removed its probes (the
 * diagnosis' own revision says why), else the agent's own reason. */
static const char *run_end(const cmr_diagnosis_run_t *r)
{
    if (r->state == CMR_DIAG_ACTIVE)
        return "";
    if (r->end_reason == CMR_DIAG_END_NONE)
        return "cmr";
    return (unsigned)r->end_reason < 7 ? diag_end_names[r->end_reason] : "?";
}

static json_t *diagnoses_json(const cmr_agent_status_t *s)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < s->diagnoses.count; i++) {
        const cmr_diagnosis_run_t *r = &s->diagnoses.items[i];
        char id[17];
        snprintf(id, sizeof id, "%016" PRIx64, (uint64_t)r->id);
        json_array_append_new(a, json_pack("{s:s, s:s, s:s, s:I, s:I, s:i, s:f, s:I, s:I}", "id", id, "state",
                                           r->state == CMR_DIAG_ACTIVE ? "active" : "ended", "ended_by", run_end(r),
                                           "hits", (json_int_t)r->hits, "calls", (json_int_t)r->events, "classes",
                                           (int)r->classes, "overhead_pct", r->overhead_pct, "started_ms",
                                           (json_int_t)r->started_ms, "ended_ms", (json_int_t)r->ended_ms));
    }
    return a;
}

static json_t *status_json(const cmr_names_t *names, const cmr_agent_status_t *s)
{
    char id[17], name[512];
    snprintf(id, sizeof id, "%016" PRIx64, (uint64_t)s->agent_id);
    cmr_names_agent(names, (uint64_t)s->agent_id, name, sizeof name);
    json_t *o = json_pack("{s:s, s:o, s:s, s:I, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "agent", id,
                          "name", cmr_json_str(name), "state", (unsigned)s->state < 6 ? state_names[s->state] : "?",
                          "time_ms", (json_int_t)s->time_ms, "environment", cmr_json_str(s->environment_id), "revision",
                          (json_int_t)s->environment_revision, "events_recorded", (json_int_t)s->events_recorded,
                          "events_dropped", (json_int_t)s->events_dropped, "classes_seen", (json_int_t)s->classes_seen,
                          "classes_sent", (json_int_t)s->classes_sent, "classes_instrumented",
                          (json_int_t)s->classes_instrumented, "redefine_failures", (json_int_t)s->redefine_failures,
                          "messages_failed", (json_int_t)s->messages_failed, "commands_accepted",
                          (json_int_t)s->commands_accepted, "commands_refused", (json_int_t)refused_total(s));
    if (o) {
        json_object_set_new(o, "traces_dropped", json_integer((json_int_t)s->traces_dropped));
        json_object_set_new(o, "diagnoses", diagnoses_json(s));
    }
    return o;
}

static void status_text(FILE *f, const cmr_names_t *names, const cmr_agent_status_t *s, int64_t now_ms)
{
    char name[512];
    cmr_names_agent(names, (uint64_t)s->agent_id, name, sizeof name);
    fprintf(f,
            "%016" PRIx64 "  %-14s %6.0fs ago  %-12s r%-4" PRId64 " classes %" PRId64 "/%" PRId64
            " instrumented  events %" PRId64 " dropped %" PRId64 "  traces dropped %" PRId64
            "  redefine failures %" PRId64 "  %s\n",
            (uint64_t)s->agent_id, (unsigned)s->state < 6 ? state_names[s->state] : "?",
            (double)(now_ms - s->time_ms) / 1000.0, s->environment_id, s->environment_revision, s->classes_instrumented,
            s->classes_seen, s->events_recorded, s->events_dropped, s->traces_dropped, s->redefine_failures, name);
    for (size_t i = 0; i < s->diagnoses.count; i++) {
        const cmr_diagnosis_run_t *r = &s->diagnoses.items[i];
        fprintf(f,
                "    diagnosis %016" PRIx64 "  %-6s%s%-14s hits %" PRId64 "  calls %" PRId64
                "  classes %d  overhead %.3f%%\n",
                (uint64_t)r->id, r->state == CMR_DIAG_ACTIVE ? "active" : "ended",
                r->state == CMR_DIAG_ACTIVE ? "" : " by ", run_end(r), r->hits, r->events, (int)r->classes,
                r->overhead_pct);
    }
}

/* Calls fn on each stored status of the wanted range: with agent 0, the latest of every
 * agent; else every status of that agent in [from_ms, to_ms). */
typedef void status_fn(const cmr_agent_status_t *s, void *opaque);

static void scan_meta(cmr_store_t *meta, uint64_t agent, int64_t from_ms, int64_t to_ms, status_fn *fn, void *opaque)
{
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(cmr_store_db(meta), ro, cmr_store_cf(meta, STATUS_CF));
    uint8_t k[16];
    status_key(k, agent, agent ? from_ms : INT64_MIN);
    for (rocksdb_iter_seek(it, (const char *)k, 16); rocksdb_iter_valid(it);) {
        size_t kl, vl;
        const uint8_t *key = (const uint8_t *)rocksdb_iter_key(it, &kl);
        if (kl != 16)
            break;
        uint64_t a = cmr_be64(key);
        if (agent && (a != agent || cmr_be64_ordered(key + 8) >= to_ms))
            break;
        if (!agent) { /* the latest of agent a, then the next agent */
            status_key(k, a, INT64_MAX);
            rocksdb_iter_seek_for_prev(it, (const char *)k, 16);
            if (!rocksdb_iter_valid(it))
                break;
        }
        const char *v = rocksdb_iter_value(it, &vl);
        cmr_msg_t m;
        char err[128];
        if (cmr_msg_decode(v, vl, &m, err, sizeof err) == CMR_WIRE_OK) {
            if (m.type == CMR_MSG_AGENT_STATUS)
                fn(&m.u.agent_status, opaque);
            cmr_msg_free(&m);
        }
        if (agent) {
            rocksdb_iter_next(it);
        } else {
            if (a == UINT64_MAX)
                break;
            status_key(k, a + 1, INT64_MIN);
            rocksdb_iter_seek(it, (const char *)k, 16);
        }
    }
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
}

typedef struct agents_out {
    const cmr_names_t *names;
    json_t *list;
    cmr_u64map_t seen; /* agents listed (latest mode: several meta slots hold the same agents) */
    bool latest;
    FILE *text;
    int64_t now_ms;
} agents_out_t;

static void emit(const cmr_agent_status_t *s, void *opaque)
{
    agents_out_t *o = opaque;
    if (o->latest && cmr_u64map_has(&o->seen, (uint64_t)s->agent_id))
        return;
    if (o->latest)
        cmr_u64map_put(&o->seen, (uint64_t)s->agent_id, (void *)1);
    json_array_append_new(o->list, status_json(o->names, s));
    if (o->text)
        status_text(o->text, o->names, s, o->now_ms);
}

int cmr_ingest_agents(const char *root, uint64_t agent, int64_t from_ms, int64_t to_ms, char **json, FILE *text,
                      char *err, size_t errlen)
{
    cmr_ingest_view_t *v = cmr_ingest_view_open(root, err, errlen);
    if (!v)
        return -1;
    agents_out_t o = {.names = cmr_ingest_view_names(v),
                      .list = json_array(),
                      .latest = agent == 0,
                      .text = text,
                      .now_ms = cmr_wall_ms()};
    cmr_store_t *const *metas;
    size_t n = cmr_ingest_view_metas(v, &metas);
    for (size_t i = 0; i < n && (o.latest || i == 0); i++) /* history: one slot has it all */
        scan_meta(metas[i], agent, from_ms, to_ms ? to_ms : INT64_MAX, emit, &o);
    json_t *doc = json_pack("{s:o}", agent ? "history" : "agents", o.list);
    *json = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    cmr_u64map_free(&o.seen);
    cmr_ingest_view_free(v);
    return *json ? 0 : -1;
}

/* --- the agents of an environment (the traces' env filter) ------------------------------- */

typedef struct env_scan {
    const char *env;
    cmr_u64map_t latest; /* agent id -> time_ms << 1 | (its environment is env); never 0 (time_ms > 0) */
    bool oom;
} env_scan_t;

static void env_latest(const cmr_agent_status_t *s, void *opaque)
{
    env_scan_t *e = opaque;
    if (s->time_ms <= 0 || s->time_ms >= INT64_MAX / 2)
        return; /* not stored (cmr_ingest_status_add) */
    uint64_t agent = (uint64_t)s->agent_id;
    uintptr_t prev = (uintptr_t)cmr_u64map_get(&e->latest, agent);
    if (prev && (int64_t)(prev >> 1) >= s->time_ms)
        return; /* another meta slot has a newer status of the agent (or the same) */
    uintptr_t val = ((uintptr_t)s->time_ms << 1) | (uintptr_t)(strcmp(s->environment_id, e->env) == 0);
    if (cmr_u64map_put(&e->latest, agent, (void *)val) != 0)
        e->oom = true;
}

long cmr_ingest_status_env_agents(cmr_store_t *const *metas, size_t nmetas, const char *env, uint64_t **ids)
{
    *ids = NULL;
    env_scan_t e = {.env = env};
    for (size_t i = 0; i < nmetas; i++) /* the slots of workers that read the topic to different points */
        scan_meta(metas[i], 0, INT64_MIN, INT64_MAX, env_latest, &e);
    size_t n = 0, it = 0;
    uint64_t agent;
    void *val;
    uint64_t *out = e.oom ? NULL : malloc((cmr_u64map_count(&e.latest) + 1) * sizeof *out);
    while (out && cmr_u64map_next(&e.latest, &it, &agent, &val))
        if ((uintptr_t)val & 1)
            out[n++] = agent;
    cmr_u64map_free(&e.latest);
    if (!out)
        return -1;
    qsort(out, n, sizeof *out, cmr_u64_cmp);
    *ids = out;
    return (long)n;
}
