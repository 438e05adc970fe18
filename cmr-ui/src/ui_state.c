/*
 * ui_state.c - what cmr-ui knows of its own: the environments and agent mappings
 * (cmr.config), the diagnoses and their history (cmr.diagnoses) and the trees the
 * instrumenter discovered (cmr.diagnosis-trees). One thread reads the three topics from
 * their beginning and keeps following them, applying each record to the same projections
 * cmr-config and cmr-instrumenter use (cmr/cfg_state.h, cmr/diagnoses.h); requests render
 * JSON from them under a read lock. Like every CMR state, it is rebuilt from the topics at
 * start: nothing is stored.
 *
 * Trees: the latest revision per (diagnosis, agent) is kept decoded; a record that does not
 * decode, or a tree older than the one held, is dropped (counted in the log at debug).
 *
 * Ownership: the state owns its readers, thread, projections and trees.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cmr/cfg_doc.h"
#include "cmr/cfg_state.h"
#include "cmr/clock.h"
#include "cmr/diagnoses.h"
#include "cmr/ids.h"
#include "cmr/json.h"
#include "cmr/log.h"
#include "cmr/reader.h"
#include "cmr/topics.h"
#include "cmr/wire.h"
#include "ui_internal.h"

enum { T_CONFIG, T_DIAGNOSES, T_TREES, T_COUNT };

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
        if (cmr_msg_decode(rec->payload, rec->len, &m, err, sizeof err) != CMR_WIRE_OK)
            return;
        if (m.type == CMR_MSG_DIAGNOSIS_TREE)
            keep_tree(s, &m);
        else
            cmr_msg_free(&m);
    }
}

static const cmr_topic_t topics[T_COUNT] = {CMR_TOPIC_CONFIG, CMR_TOPIC_DIAGNOSES, CMR_TOPIC_DIAGNOSIS_TREES};

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
    bool up = s->caught_up[T_CONFIG] && s->caught_up[T_DIAGNOSES] && s->caught_up[T_TREES];
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

void ui_state_environments(ui_state_t *s, cmr_http_response_t *res)
{
    json_t *envs = json_array();
    pthread_mutex_lock(&s->lock);
    int64_t rev;
    for (size_t i = 0; i < cmr_cfg_state_env_count(s->config); i++) {
        const cmr_environment_t *e = cmr_cfg_state_env_at(s->config, i, &rev);
        json_array_append_new(envs, json_pack("{s:o,s:o,s:I,s:I,s:I}", "id", cmr_json_str(e->id), "name",
                                              cmr_json_str(e->name ? e->name : ""), "revision", (json_int_t)rev,
                                              "sensors", (json_int_t)e->assignments.count, "thresholds",
                                              (json_int_t)e->thresholds.count));
    }
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
        }
    }
    json_t *o = found ? json_pack("{s:o,s:o,s:I,s:o}", "id", cmr_json_str(id), "name", cmr_json_str(name), "revision",
                                  (json_int_t)rev, "yaml", cmr_json_str(yaml ? yaml : ""))
                      : NULL;
    pthread_mutex_unlock(&s->lock);
    free(yaml);
    if (o)
        ui_json(res, 200, o);
    else
        ui_error(res, 404, "no environment \"%s\"", id);
}
