/*
 * ui_state.c - what cmr-ui knows of its own: the environments and agent mappings
 * (cmr.config), the diagnoses and their history (cmr.diagnoses), the trees the
 * instrumenter discovered (cmr.diagnosis-trees) and the methods the overhead budget took
 * the probes of (cmr.budget). One thread reads the four topics from
 * their beginning and keeps following them, applying each record to the same projections
 * cmr-config and cmr-instrumenter use (cmr/cfg_state.h, cmr/diagnoses.h); requests render
 * JSON from them under a read lock. Like every CMR state, it is rebuilt from the topics at
 * start: nothing is stored.
 *
 * Trees: the latest revision per (diagnosis, agent) is kept decoded; a record that does not
 * decode, or a tree older than the one held, is dropped (counted in the log at debug).
 *
 * Budget removals: the last record per key (environment, method) is kept decoded, at most
 * UI_BUDGET_MAX in all (more are refused and counted); an environment's page lists those
 * of its current revision as in force, and older ones as history.
 *
 * Ownership: the state owns its readers, thread, projections and trees.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cmr/buf.h"
#include "cmr/bytes.h"
#include "cmr/cfg_doc.h"
#include "cmr/cfg_state.h"
#include "cmr/clock.h"
#include "cmr/diagnoses.h"
#include "cmr/ids.h"
#include "cmr/json.h"
#include "cmr/log.h"
#include "cmr/map.h"
#include "cmr/reader.h"
#include "cmr/topics.h"
#include "cmr/wire.h"
#include "ui_internal.h"

enum { T_CONFIG, T_DIAGNOSES, T_TREES, T_BUDGET, T_COUNT };

#define UI_BUDGET_MAX 100000 /* removals held, all environments together */
#define UI_BUDGET_SHOWN 2000 /* removals one environment's answer lists */
#define UI_ENV_ID_MAX 512    /* a longer environment id is no configuration's: its removal is dropped */

typedef struct tree_slot {
    cmr_msg_t msg; /* a decoded DiagnosisTree (owned) */
} tree_slot_t;

struct ui_state {
    cmr_reader_t *readers[T_COUNT]; /* owned; used by the thread only */
    pthread_t thread;
    bool thread_started;
    volatile int stop;
    pthread_mutex_t lock; /* everything below */
    pthread_cond_t changed;
    cmr_cfg_state_t *config;
    cmr_diagnoses_t *diagnoses;
    tree_slot_t *trees; /* owned array */
    size_t ntrees, cap_trees;
    cmr_msg_t *removals; /* owned array of decoded BudgetRemovals */
    size_t nremovals, cap_removals;
    cmr_map_t removal_at;      /* environment id \0 method id (8 bytes) -> index + 1 */
    uint64_t removals_refused; /* over UI_BUDGET_MAX */
    bool caught_up[T_COUNT];
    int64_t config_changes; /* records that changed the configuration, since the start */
    cmr_conf_t *conf;       /* owned copy: readers are made again after a fatal error */
};

/* --- applying records -------------------------------------------------------------------- */

static void keep_tree(ui_state_t *s, cmr_msg_t *m)
{
    const cmr_diagnosis_tree_t *t = &m->u.diagnosis_tree;
    for (size_t i = 0; i < s->ntrees; i++) {
        const cmr_diagnosis_tree_t *o = &s->trees[i].msg.u.diagnosis_tree;
        if (o->agent_id == t->agent_id && !strcmp(o->diagnosis_id, t->diagnosis_id)) {
            if (o->revision > t->revision || (o->revision == t->revision && o->time_ms > t->time_ms)) {
                cmr_msg_free(m);
                return;
            }
            cmr_msg_free(&s->trees[i].msg);
            s->trees[i].msg = *m;
            return;
        }
    }
    if (s->ntrees == s->cap_trees) {
        size_t cap = s->cap_trees ? s->cap_trees * 2 : 16;
        tree_slot_t *p = realloc(s->trees, cap * sizeof *p);
        if (!p) {
            cmr_msg_free(m);
            return;
        }
        s->trees = p;
        s->cap_trees = cap;
    }
    s->trees[s->ntrees++].msg = *m;
}

/* Keeps m (a decoded BudgetRemoval, taken over) as the removal of its key, replacing the
 * one held: cmr.budget is compacted, and a later record of a key is the newer decision. */
static void keep_removal(ui_state_t *s, cmr_msg_t *m)
{
    const cmr_budget_removal_msg_t *r = &m->u.budget_removal;
    char key[UI_ENV_ID_MAX + 1 + 8];
    size_t n = strlen(r->environment_id);
    if (n > UI_ENV_ID_MAX) {
        cmr_msg_free(m);
        return;
    }
    memcpy(key, r->environment_id, n + 1);
    cmr_put_be64((uint8_t *)key + n + 1, (uint64_t)r->method_id);
    size_t at = (size_t)(uintptr_t)cmr_map_get(&s->removal_at, key, n + 9);
    if (at) {
        cmr_msg_free(&s->removals[at - 1]);
        s->removals[at - 1] = *m;
        return;
    }
    if (s->nremovals >= UI_BUDGET_MAX || CMR_ARRAY_GROW(s->removals, s->cap_removals, s->nremovals + 1) != 0 ||
        cmr_map_put(&s->removal_at, key, n + 9, (void *)(uintptr_t)(s->nremovals + 1)) != 0) {
        if (s->removals_refused++ % 1000 == 0)
            cmr_log(CMR_LOG_WARN, "ui.budget_refused", "held=%zu refused=%" PRIu64 " max=%d", s->nremovals,
                    s->removals_refused, UI_BUDGET_MAX);
        cmr_msg_free(m);
        return;
    }
    s->removals[s->nremovals++] = *m;
}

static void apply(ui_state_t *s, int topic, const cmr_reader_rec_t *rec)
{
    char err[256];
    if (topic == T_CONFIG) {
        int effect = cmr_cfg_state_apply(s->config, rec->payload, rec->len, NULL, err, sizeof err);
        if (effect < 0)
            cmr_log(CMR_LOG_DEBUG, "ui.bad_record", "topic=config offset=%" PRId64 " error=\"%s\"", rec->offset, err);
        else if (effect != CMR_CFG_IGNORED)
            s->config_changes++;
    } else if (topic == T_DIAGNOSES) {
        if (cmr_diagnoses_apply(s->diagnoses, rec->payload, rec->len, err, sizeof err) < 0)
            cmr_log(CMR_LOG_DEBUG, "ui.bad_record", "topic=diagnoses offset=%" PRId64 " error=\"%s\"", rec->offset,
                    err);
    } else {
        cmr_msg_t m;
        const char *name = topic == T_TREES ? "diagnosis-trees" : "budget";
        if (cmr_msg_decode(rec->payload, rec->len, &m, err, sizeof err) != CMR_WIRE_OK) {
            cmr_log(CMR_LOG_DEBUG, "ui.bad_record", "topic=%s offset=%" PRId64 " error=\"%s\"", name, rec->offset, err);
            return;
        }
        if (m.type == CMR_MSG_DIAGNOSIS_TREE && topic == T_TREES) {
            keep_tree(s, &m);
        } else if (m.type == CMR_MSG_BUDGET_REMOVAL && topic == T_BUDGET) {
            keep_removal(s, &m);
        } else {
            cmr_log(CMR_LOG_DEBUG, "ui.bad_record", "topic=%s offset=%" PRId64 " error=\"a %s has no place there\"",
                    name, rec->offset, cmr_msg_type_name(m.type));
            cmr_msg_free(&m);
        }
    }
}

static const cmr_topic_t topics[T_COUNT] = {CMR_TOPIC_CONFIG, CMR_TOPIC_DIAGNOSES, CMR_TOPIC_DIAGNOSIS_TREES,
                                            CMR_TOPIC_BUDGET};

/* A reader that failed for good is made again from the start of its topic: the projection
 * it feeds ignores what it has already applied (revisions), so nothing is applied twice. */
static void renew_reader(ui_state_t *s, int t)
{
    char err[256];
    cmr_log(CMR_LOG_WARN, "ui.topic_reader_failed", "topic=%s note=\"reading it again from its start in 1 s\"",
            cmr_topic_name(topics[t]));
    pthread_mutex_lock(&s->lock);
    s->caught_up[t] = false;
    pthread_mutex_unlock(&s->lock);
    cmr_reader_free(s->readers[t]);
    s->readers[t] = NULL;
    cmr_sleep_ms(1000);
    s->readers[t] = cmr_reader_new(s->conf, cmr_topic_name(topics[t]), 0, err, sizeof err);
    if (!s->readers[t])
        cmr_log(CMR_LOG_WARN, "ui.topic_reader_failed", "topic=%s error=\"%s\"", cmr_topic_name(topics[t]), err);
}

/* The follower: polls the readers in turn; a record is applied under the lock. */
static void *follow(void *arg)
{
    ui_state_t *s = arg;
    while (!s->stop) {
        int got_any = 0;
        for (int t = 0; t < T_COUNT && !s->stop; t++) {
            cmr_reader_rec_t rec;
            if (!s->readers[t]) {
                renew_reader(s, t);
                continue;
            }
            for (int k = 0; k < 256; k++) {
                int got = cmr_reader_poll(s->readers[t], 0, &rec);
                if (got < 0) {
                    renew_reader(s, t);
                    break;
                }
                bool up = cmr_reader_caught_up(s->readers[t]);
                if (got != 1) {
                    if (up && !s->caught_up[t]) {
                        pthread_mutex_lock(&s->lock);
                        s->caught_up[t] = true;
                        pthread_cond_broadcast(&s->changed);
                        pthread_mutex_unlock(&s->lock);
                    }
                    break;
                }
                got_any = 1;
                pthread_mutex_lock(&s->lock);
                apply(s, t, &rec);
                s->caught_up[t] = up;
                pthread_cond_broadcast(&s->changed);
                pthread_mutex_unlock(&s->lock);
            }
        }
        if (!got_any)
            cmr_sleep_ms(20);
    }
    return NULL;
}

ui_state_t *ui_state_start(const cmr_conf_t *conf, char *err, size_t errlen)
{
    ui_state_t *s = calloc(1, sizeof *s);
    if (!s || !(s->config = cmr_cfg_state_new()) || !(s->diagnoses = cmr_diagnoses_new())) {
        snprintf(err, errlen, "out of memory");
        ui_state_stop(s);
        return NULL;
    }
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->changed, NULL);
    if (!(s->conf = cmr_conf_dup(conf))) {
        snprintf(err, errlen, "out of memory");
        ui_state_stop(s);
        return NULL;
    }
    for (int t = 0; t < T_COUNT; t++) {
        char rerr[256];
        s->readers[t] = cmr_reader_new(conf, cmr_topic_name(topics[t]), 0, rerr, sizeof rerr);
        if (!s->readers[t]) {
            snprintf(err, errlen, "cannot read %s: %s", cmr_topic_name(topics[t]), rerr);
            ui_state_stop(s);
            return NULL;
        }
    }
    if (pthread_create(&s->thread, NULL, follow, s) != 0) {
        snprintf(err, errlen, "cannot start the topic reader thread");
        ui_state_stop(s);
        return NULL;
    }
    s->thread_started = true;
    return s;
}

void ui_state_stop(ui_state_t *s)
{
    if (!s)
        return;
    s->stop = 1;
    if (s->thread_started)
        pthread_join(s->thread, NULL);
    for (int t = 0; t < T_COUNT; t++)
        cmr_reader_free(s->readers[t]);
    for (size_t i = 0; i < s->ntrees; i++)
        cmr_msg_free(&s->trees[i].msg);
    free(s->trees);
    for (size_t i = 0; i < s->nremovals; i++)
        cmr_msg_free(&s->removals[i]);
    free(s->removals);
    cmr_map_free(&s->removal_at);
    cmr_cfg_state_free(s->config);
    cmr_diagnoses_free(s->diagnoses);
    cmr_conf_destroy(s->conf);
    if (s->thread_started || s->config) {
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->changed);
    }
    free(s);
}

bool ui_state_caught_up(ui_state_t *s)
{
    pthread_mutex_lock(&s->lock);
    bool up = true;
    for (int t = 0; t < T_COUNT; t++)
        up = up && s->caught_up[t];
    pthread_mutex_unlock(&s->lock);
    return up;
}

/* Waits on the condition until ready(s, a, b) or timeout; the lock held by the caller. */
typedef bool(ready_fn)(ui_state_t *s, const char *id, int64_t revision);

static bool wait_until(ui_state_t *s, ready_fn *ready, const char *id, int64_t revision, int timeout_ms)
{
    int64_t deadline = cmr_mono_ms() + timeout_ms;
    pthread_mutex_lock(&s->lock);
    bool ok;
    while (!(ok = ready(s, id, revision))) {
        int64_t left = deadline - cmr_mono_ms();
        if (left <= 0)
            break;
        struct timespec ts = cmr_wall_deadline(left < 100 ? left : 100);
        pthread_cond_timedwait(&s->changed, &s->lock, &ts);
    }
    pthread_mutex_unlock(&s->lock);
    return ok;
}

static bool diagnosis_ready(ui_state_t *s, const char *id, int64_t revision)
{
    const cmr_diagnosis_t *d = cmr_diagnoses_get(s->diagnoses, id);
    return d && d->revision >= revision;
}


bool ui_state_wait_diagnosis(ui_state_t *s, const char *id, int64_t revision, int timeout_ms)
{
    return wait_until(s, diagnosis_ready, id, revision, timeout_ms);
}

static bool diagnosis_ended(ui_state_t *s, const char *id, int64_t unused)
{
    (void)unused;
    const cmr_diagnosis_t *d = cmr_diagnoses_get(s->diagnoses, id);
    return d && d->state == CMR_DIAG_ENDED;
}

bool ui_state_wait_ended(ui_state_t *s, const char *id, int timeout_ms)
{
    return wait_until(s, diagnosis_ended, id, 0, timeout_ms);
}

int64_t ui_state_config_changes(ui_state_t *s)
{
    pthread_mutex_lock(&s->lock);
    int64_t n = s->config_changes;
    pthread_mutex_unlock(&s->lock);
    return n;
}

static bool config_changed_since(ui_state_t *s, const char *unused, int64_t before)
{
    (void)unused;
    return s->config_changes > before;
}

bool ui_state_wait_config_changes(ui_state_t *s, int64_t before, int timeout_ms)
{
    return wait_until(s, config_changed_since, "", before, timeout_ms);
}


/* --- rendering --------------------------------------------------------------------------- */

static json_t *method_json(const char *cls, const char *name, const char *desc)
{
    char buf[2400];
    return cmr_json_str(cmr_diag_method_text(cls, name, desc, buf, sizeof buf));
}

static json_t *agents_json(const cmr_bytes_t *agents)
{
    json_t *a = json_array();
    for (size_t i = 0; i + 8 <= agents->len; i += 8) {
        uint64_t v = 0;
        for (int k = 0; k < 8; k++)
            v = v << 8 | agents->data[i + (size_t)k];
        json_array_append_new(a, cmr_json_id64(v));
    }
    return a;
}

static json_t *nullable_str(const char *s)
{
    return s && *s ? cmr_json_str(s) : json_null();
}

static json_t *diagnosis_json(const cmr_diagnosis_t *d)
{
    json_t *conds = json_array(), *excl = json_array();
    for (size_t i = 0; i < d->conditions.count; i++) {
        const cmr_diag_condition_t *c = &d->conditions.items[i];
        char buf[1200];
        snprintf(buf, sizeof buf, "%s%s%s=%s", cmr_diag_condition_name(c->kind), *c->name ? ":" : "", c->name,
                 c->pattern);
        json_array_append_new(conds, cmr_json_str(buf));
    }
    for (size_t i = 0; i < d->exclude.count; i++) {
        char buf[1200];
        snprintf(buf, sizeof buf, "%s", d->exclude.items[i]);
        json_array_append_new(excl, cmr_json_str(cmr_diag_dotted(buf)));
    }
    bool active = d->state == CMR_DIAG_ACTIVE;
    json_t *o = json_object();
    json_object_set_new(o, "id", cmr_json_str(d->id));
    json_object_set_new(o, "revision", json_integer(d->revision));
    json_object_set_new(o, "state", json_string(cmr_diag_state_name(d->state)));
    json_object_set_new(o, "end_reason", active ? json_null() : json_string(cmr_diag_end_reason_name(d->end_reason)));
    json_object_set_new(o, "cause", json_string(cmr_diag_cause_name(d->cause)));
    json_object_set_new(o, "rule", nullable_str(d->rule));
    json_object_set_new(o, "environment", cmr_json_str(d->environment_id));
    json_object_set_new(o, "agents", agents_json(&d->agents));
    json_object_set_new(o, "method", method_json(d->class_name, d->method_name, d->descriptor));
    json_object_set_new(o, "method_id", d->method_id ? cmr_json_id64((uint64_t)d->method_id) : json_null());
    json_object_set_new(o, "depth", json_integer(d->depth));
    json_object_set_new(o, "include_jdk", json_boolean(d->include_jdk));
    json_object_set_new(o, "exclude", excl);
    json_object_set_new(o, "conditions", conds);
    json_object_set_new(o, "ttl_ms", json_integer(d->ttl_ms));
    json_object_set_new(o, "max_hits", json_integer(d->max_hits));
    json_object_set_new(o, "budget_pct", json_real(d->overhead_budget_pct));
    json_object_set_new(o, "until_normal_ms", json_integer(d->end_after_normal_ms));
    json_object_set_new(o, "trace_id", nullable_str(d->trace_id));
    json_object_set_new(o, "author", cmr_json_str(d->author ? d->author : ""));
    json_object_set_new(o, "started_ms", json_integer(d->started_ms));
    json_object_set_new(o, "ended_ms", active ? json_null() : json_integer(d->ended_ms));
    json_object_set_new(o, "time_ms", json_integer(d->time_ms));
    json_object_set_new(o, "ends_ms", json_integer(d->started_ms + d->ttl_ms));
    return o;
}

static json_t *tree_json(const cmr_diagnosis_tree_t *t)
{
    json_t *nodes = json_array();
    for (size_t i = 0; i < t->nodes.count; i++) {
        const cmr_diag_node_t *x = &t->nodes.items[i];
        json_t *n = json_object();
        json_object_set_new(n, "parent", json_integer(x->parent));
        json_object_set_new(n, "depth", json_integer(x->depth));
        json_object_set_new(n, "method", method_json(x->class_name, x->method_name, x->descriptor));
        json_object_set_new(n, "method_id", cmr_json_id64((uint64_t)x->method_id));
        json_object_set_new(n, "via", json_string(cmr_diag_via_name(x->via)));
        json_object_set_new(n, "status", json_string(cmr_diag_node_status_name(x->status)));
        json_object_set_new(n, "call_sites", json_integer(x->call_sites));
        json_object_set_new(n, "probe", json_string(cmr_diag_probe_name(x->probe)));
        json_object_set_new(n, "note", cmr_json_str(x->note ? x->note : ""));
        json_array_append_new(nodes, n);
    }
    json_t *o = json_object();
    json_object_set_new(o, "agent", cmr_json_id64((uint64_t)t->agent_id));
    json_object_set_new(o, "revision", json_integer(t->revision));
    json_object_set_new(o, "time_ms", json_integer(t->time_ms));
    json_object_set_new(o, "classes_read", json_integer(t->classes_read));
    json_object_set_new(o, "truncated", json_boolean(t->truncated));
    json_object_set_new(o, "error", nullable_str(t->error));
    json_object_set_new(o, "nodes", nodes);
    return o;
}

void ui_state_diagnoses(ui_state_t *s, cmr_http_response_t *res)
{
    json_t *list = json_array();
    pthread_mutex_lock(&s->lock);
    for (size_t i = cmr_diagnoses_count(s->diagnoses); i-- > 0;) /* newest first */
        json_array_append_new(list, diagnosis_json(cmr_diagnoses_at(s->diagnoses, i)));
    pthread_mutex_unlock(&s->lock);
    ui_json(res, 200, json_pack("{s:o}", "diagnoses", list));
}

void ui_state_diagnosis(ui_state_t *s, const char *id, cmr_http_response_t *res)
{
    if (!cmr_diag_id_valid(id)) {
        ui_error(res, 400, "a diagnosis id is 16 hex digits");
        return;
    }
    pthread_mutex_lock(&s->lock);
    const cmr_diagnosis_t *d = cmr_diagnoses_get(s->diagnoses, id);
    if (!d) {
        pthread_mutex_unlock(&s->lock);
        ui_error(res, 404, "no diagnosis %s", id);
        return;
    }
    const cmr_diagnosis_t *revs[64];
    size_t n = cmr_diagnoses_history(s->diagnoses, id, revs, 64);
    json_t *history = json_array(), *trees = json_array();
    for (size_t i = 0; i < n && i < 64; i++)
        json_array_append_new(history, diagnosis_json(revs[i]));
    for (size_t i = 0; i < s->ntrees; i++) {
        const cmr_diagnosis_tree_t *t = &s->trees[i].msg.u.diagnosis_tree;
        if (!strcmp(t->diagnosis_id, id))
            json_array_append_new(trees, tree_json(t));
    }
    json_t *o = json_pack("{s:o,s:o,s:o}", "diagnosis", diagnosis_json(d), "history", history, "trees", trees);
    pthread_mutex_unlock(&s->lock);
    ui_json(res, 200, o);
}

/* YAML of an environment (or the mappings) as `cmr-config show` writes it. NULL: no memory. */
static char *env_yaml(const cmr_environment_t *e, const cmr_agent_mapping_t *m, size_t nm)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    fprintf(f, "version: %d\n", CMR_CFG_FORMAT_VERSION);
    if (e) {
        fprintf(f, "environments:\n");
        cmr_cfg_write_env(e, f);
    } else {
        cmr_cfg_write_mappings(m, nm, f);
    }
    fclose(f);
    return text;
}

/* The whole configuration as one document `cmr-config apply` reads. */
static char *all_yaml(const cmr_cfg_state_t *c)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    int64_t rev;
    fprintf(f, "version: %d\nenvironments:\n", CMR_CFG_FORMAT_VERSION);
    for (size_t i = 0; i < cmr_cfg_state_env_count(c); i++)
        cmr_cfg_write_env(cmr_cfg_state_env_at(c, i, &rev), f);
    size_t n;
    const cmr_agent_mapping_t *m = cmr_cfg_state_mappings(c, &n, &rev);
    cmr_cfg_write_mappings(m, n, f);
    fclose(f);
    return text;
}

/* Whether r belongs to its environment's current revision (the removals in force). */
static bool removal_in_force(const ui_state_t *s, const cmr_budget_removal_msg_t *r)
{
    int64_t rev;
    return cmr_cfg_state_env(s->config, r->environment_id, &rev) && rev == r->revision;
}

/* The removals in force per environment: id -> count (as a pointer). */
static void removals_in_force(const ui_state_t *s, cmr_map_t *counts)
{
    for (size_t i = 0; i < s->nremovals; i++) {
        const cmr_budget_removal_msg_t *r = &s->removals[i].u.budget_removal;
        if (!removal_in_force(s, r))
            continue;
        bool created;
        void **slot = cmr_map_get_slot(counts, r->environment_id, strlen(r->environment_id), &created);
        if (slot)
            *slot = (void *)((uintptr_t)*slot + 1);
    }
}

static json_t *removal_json(const cmr_budget_removal_msg_t *r, bool in_force)
{
    json_t *o = json_object();
    json_object_set_new(o, "method_id", cmr_json_id64((uint64_t)r->method_id));
    json_object_set_new(o, "revision", json_integer(r->revision));
    json_object_set_new(o, "in_force", json_boolean(in_force));
    json_object_set_new(o, "agent", cmr_json_id64((uint64_t)r->agent_id));
    json_object_set_new(o, "time_ms", json_integer(r->time_ms));
    json_object_set_new(o, "calls", json_integer(r->calls));
    json_object_set_new(o, "self_ns_per_call", json_real(r->self_ns_per_call));
    json_object_set_new(o, "cost_pct", json_real(r->cost_pct));
    json_object_set_new(o, "reason", cmr_json_str(r->reason ? r->reason : ""));
    return o;
}

typedef struct shown_removal {
    const cmr_budget_removal_msg_t *r;
    bool in_force;
} shown_removal_t;

/* In force first, then the most expensive in probes, then by method id. */
static int removal_order(const void *a, const void *b)
{
    const shown_removal_t *x = a, *y = b;
    if (x->in_force != y->in_force)
        return x->in_force ? -1 : 1;
    if (x->r->cost_pct != y->r->cost_pct)
        return x->r->cost_pct > y->r->cost_pct ? -1 : 1;
    return x->r->method_id < y->r->method_id ? -1 : x->r->method_id > y->r->method_id;
}

/* One environment's budget: {pct, off, in_force, history, shown, removals: [...]}; pct is
 * the environment's own (overhead_budget_pct), null when it takes cmr-instrumenter's; at most
 * UI_BUDGET_SHOWN removals, in removal_order. NULL: no memory. */
static json_t *budget_json(const ui_state_t *s, const cmr_environment_t *env)
{
    const char *env_id = env->id;
    shown_removal_t *v = malloc((s->nremovals + 1) * sizeof *v);
    if (!v)
        return NULL;
    size_t n = 0, in_force = 0;
    for (size_t i = 0; i < s->nremovals; i++) {
        const cmr_budget_removal_msg_t *r = &s->removals[i].u.budget_removal;
        if (strcmp(r->environment_id, env_id) != 0)
            continue;
        v[n] = (shown_removal_t){r, removal_in_force(s, r)};
        in_force += v[n++].in_force;
    }
    qsort(v, n, sizeof *v, removal_order);
    json_t *list = json_array();
    for (size_t i = 0; i < n && i < UI_BUDGET_SHOWN; i++)
        json_array_append_new(list, removal_json(v[i].r, v[i].in_force));
    free(v);
    return json_pack("{s:o,s:b,s:I,s:I,s:I,s:o}", "pct",
                     env->overhead_budget_pct > 0 ? json_real(env->overhead_budget_pct) : json_null(), "off",
                     env->overhead_budget_pct < 0, "in_force", (json_int_t)in_force, "history",
                     (json_int_t)(n - in_force), "shown", (json_int_t)json_array_size(list), "removals", list);
}

void ui_state_environments(ui_state_t *s, cmr_http_response_t *res)
{
    json_t *envs = json_array();
    pthread_mutex_lock(&s->lock);
    cmr_map_t in_force = {0};
    removals_in_force(s, &in_force);
    int64_t rev;
    for (size_t i = 0; i < cmr_cfg_state_env_count(s->config); i++) {
        const cmr_environment_t *e = cmr_cfg_state_env_at(s->config, i, &rev);
        json_array_append_new(envs,
                              json_pack("{s:o,s:o,s:I,s:I,s:I,s:I}", "id", cmr_json_str(e->id), "name",
                                        cmr_json_str(e->name ? e->name : ""), "revision", (json_int_t)rev, "sensors",
                                        (json_int_t)e->assignments.count, "thresholds", (json_int_t)e->thresholds.count,
                                        "budget_removed", (json_int_t)(uintptr_t)cmr_map_get_str(&in_force, e->id)));
    }
    cmr_map_free(&in_force);
    size_t n;
    cmr_cfg_state_mappings(s->config, &n, &rev);
    char *yaml = all_yaml(s->config);
    pthread_mutex_unlock(&s->lock);
    ui_json(res, 200,
            json_pack("{s:o,s:{s:I,s:I},s:o}", "environments", envs, "mappings", "revision", (json_int_t)rev, "count",
                      (json_int_t)n, "yaml", cmr_json_str(yaml ? yaml : "")));
    free(yaml);
}

void ui_state_environment(ui_state_t *s, const char *id, cmr_http_response_t *res)
{
    pthread_mutex_lock(&s->lock);
    int64_t rev = 0;
    char *yaml = NULL;
    const char *name = "";
    bool found = true;
    json_t *budget = NULL;
    if (!strcmp(id, "mappings")) {
        size_t n;
        const cmr_agent_mapping_t *m = cmr_cfg_state_mappings(s->config, &n, &rev);
        yaml = env_yaml(NULL, m, n);
        name = "agent mappings";
    } else {
        const cmr_environment_t *e = cmr_cfg_state_env(s->config, id, &rev);
        found = e != NULL;
        if (e) {
            yaml = env_yaml(e, NULL, 0);
            name = e->name ? e->name : "";
            budget = budget_json(s, e);
        }
    }
    json_t *o = found ? json_pack("{s:o,s:o,s:I,s:o,s:o}", "id", cmr_json_str(id), "name", cmr_json_str(name),
                                  "revision", (json_int_t)rev, "yaml", cmr_json_str(yaml ? yaml : ""), "budget",
                                  budget ? budget : json_null())
                      : NULL;
    if (!o)
        json_decref(budget);
    pthread_mutex_unlock(&s->lock);
    free(yaml);
    if (o)
        ui_json(res, 200, o);
    else
        ui_error(res, 404, "no environment \"%s\"", id);
}
