/*
 * cfg_state.c - the configuration projection of cmr.config (see cfg_state.h); library
 * cmr_envstate, shared by cmr-config and cmr-instrumenter.
 *
 * Environments are kept in an array sorted by id, each holding the decoded ConfigChange
 * that defined it; the mapping table is the latest MAPPINGS change. A change whose
 * revision is not newer than the one held for its key is ignored (replays, duplicates).
 * Deleted environments keep a tombstone entry (revision only) so that a stale create
 * arriving after a delete is still ignored.
 */
#include "cmr/cfg_state.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/buf.h"
#include "cmr/wire.h"

typedef struct env_entry {
    char *id; /* owned */
    int64_t revision;
    cmr_msg_t msg; /* owned decoded ConfigChange; type = -1 when deleted */
    int live;
} env_entry_t;

struct cmr_cfg_state {
    env_entry_t *envs;
    size_t n, cap;
    cmr_msg_t mappings; /* owned; valid when have_mappings */
    int have_mappings;
    int64_t mappings_revision;
};

cmr_cfg_state_t *cmr_cfg_state_new(void)
{
    return calloc(1, sizeof(cmr_cfg_state_t));
}

void cmr_cfg_state_free(cmr_cfg_state_t *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++) {
        if (s->envs[i].live)
            cmr_msg_free(&s->envs[i].msg);
        free(s->envs[i].id);
    }
    free(s->envs);
    if (s->have_mappings)
        cmr_msg_free(&s->mappings);
    free(s);
}

/* Index of id, or where it would be inserted (with *found = 0). */
static size_t find(const cmr_cfg_state_t *s, const char *id, int *found)
{
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(s->envs[mid].id, id);
        if (c == 0) {
            *found = 1;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = 0;
    return lo;
}

static env_entry_t *entry_for(cmr_cfg_state_t *s, const char *id)
{
    int found;
    size_t at = find(s, id, &found);
    if (found)
        return &s->envs[at];
    char *copy = CMR_ARRAY_GROW(s->envs, s->cap, s->n + 1) == 0 ? strdup(id) : NULL;
    if (!copy)
        return NULL;
    assert(at <= s->n);
    memmove(&s->envs[at + 1], &s->envs[at], (s->n - at) * sizeof *s->envs);
    memset(&s->envs[at], 0, sizeof *s->envs);
    s->envs[at].id = copy;
    s->envs[at].revision = -1;
    s->n++;
    return &s->envs[at];
}

static int apply_env(cmr_cfg_state_t *s, cmr_msg_t *m, const char **changed_id, char *err, size_t errlen)
{
    cmr_config_change_t *cc = &m->u.config_change;
    if (!cc->environment || !cc->environment->id[0]) {
        snprintf(err, errlen, "ConfigChange of kind %s without an environment",
                 cc->kind == CMR_CONFIG_ENVIRONMENT ? "ENVIRONMENT" : "ENVIRONMENT_DELETED");
        cmr_msg_free(m);
        return -1;
    }
    env_entry_t *e = entry_for(s, cc->environment->id);
    if (!e) {
        snprintf(err, errlen, "out of memory");
        cmr_msg_free(m);
        return -1;
    }
    if (changed_id)
        *changed_id = e->id;
    if (cc->revision <= e->revision) {
        cmr_msg_free(m);
        return CMR_CFG_IGNORED;
    }
    if (e->live)
        cmr_msg_free(&e->msg);
    e->revision = cc->revision;
    if (cc->kind == CMR_CONFIG_ENVIRONMENT_DELETED) {
        cmr_msg_free(m);
        e->live = 0;
        return CMR_CFG_ENV_DELETED;
    }
    e->msg = *m;
    e->live = 1;
    return CMR_CFG_ENV_CHANGED;
}

int cmr_cfg_state_apply(cmr_cfg_state_t *s, const void *payload, size_t len, const char **changed_id, char *err,
                        size_t errlen)
{
    cmr_msg_t m;
    if (changed_id)
        *changed_id = NULL;
    if (cmr_msg_decode(payload, len, &m, err, errlen) != CMR_WIRE_OK)
        return -1;
    if (m.type != CMR_MSG_CONFIG_CHANGE) {
        snprintf(err, errlen, "a %s on the configuration topic", cmr_msg_type_name(m.type));
        cmr_msg_free(&m);
        return -1;
    }
    if (m.u.config_change.kind != CMR_CONFIG_MAPPINGS)
        return apply_env(s, &m, changed_id, err, errlen);
    if (s->have_mappings && m.u.config_change.revision <= s->mappings_revision) {
        cmr_msg_free(&m);
        return CMR_CFG_IGNORED;
    }
    if (s->have_mappings)
        cmr_msg_free(&s->mappings);
    s->mappings = m;
    s->have_mappings = 1;
    s->mappings_revision = m.u.config_change.revision;
    return CMR_CFG_MAPPINGS_CHANGED;
}

const cmr_environment_t *cmr_cfg_state_env(const cmr_cfg_state_t *s, const char *id, int64_t *revision)
{
    int found;
    size_t at = find(s, id, &found);
    if (!found || !s->envs[at].live)
        return NULL;
    if (revision)
        *revision = s->envs[at].revision;
    return s->envs[at].msg.u.config_change.environment;
}

size_t cmr_cfg_state_env_count(const cmr_cfg_state_t *s)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n; i++)
        n += (size_t)s->envs[i].live;
    return n;
}

const cmr_environment_t *cmr_cfg_state_env_at(const cmr_cfg_state_t *s, size_t i, int64_t *revision)
{
    for (size_t j = 0; j < s->n; j++) {
        if (!s->envs[j].live)
            continue;
        if (i-- == 0) {
            if (revision)
                *revision = s->envs[j].revision;
            return s->envs[j].msg.u.config_change.environment;
        }
    }
    return NULL;
}

/* The revision a new change of `id` must carry (also for deleted ones). */
int64_t cmr_cfg_state_key_revision(const cmr_cfg_state_t *s, const char *id)
{
    if (strcmp(id, "mappings") == 0)
        return s->have_mappings ? s->mappings_revision : 0;
    int found;
    size_t at = find(s, id, &found);
    return found ? s->envs[at].revision : 0;
}

const cmr_agent_mapping_t *cmr_cfg_state_mappings(const cmr_cfg_state_t *s, size_t *n, int64_t *revision)
{
    if (revision)
        *revision = s->have_mappings ? s->mappings_revision : 0;
    if (!s->have_mappings) {
        *n = 0;
        return NULL;
    }
    *n = s->mappings.u.config_change.mappings.count;
    return s->mappings.u.config_change.mappings.items;
}

static int str_eq(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static int assignment_eq(const cmr_sensor_assignment_t *a, const cmr_sensor_assignment_t *b)
{
    return a->sensor == b->sensor && str_eq(a->class_pattern, b->class_pattern) &&
           str_eq(a->superclass, b->superclass) && str_eq(a->interface, b->interface) &&
           str_eq(a->annotation, b->annotation) && str_eq(a->method_pattern, b->method_pattern) &&
           str_eq(a->descriptor_pattern, b->descriptor_pattern) && a->modifiers_required == b->modifiers_required &&
           a->modifiers_excluded == b->modifiers_excluded && a->constructors == b->constructors &&
           a->trivial == b->trivial;
}

static int threshold_eq(const cmr_threshold_rule_t *a, const cmr_threshold_rule_t *b)
{
    return str_eq(a->name, b->name) && a->scope == b->scope && str_eq(a->pattern, b->pattern) &&
           a->statistic == b->statistic && a->above == b->above && a->for_ms == b->for_ms &&
           a->min_count == b->min_count && a->diagnose == b->diagnose;
}

int cmr_cfg_env_equal(const cmr_environment_t *a, const cmr_environment_t *b)
{
    if (!str_eq(a->id, b->id) || !str_eq(a->name, b->name) || !str_eq(a->description, b->description) ||
        memcmp(&a->strategy, &b->strategy, sizeof a->strategy) != 0 || a->trace_context != b->trace_context ||
        a->assignments.count != b->assignments.count || a->thresholds.count != b->thresholds.count ||
        a->request_headers.count != b->request_headers.count || a->overhead_budget_pct != b->overhead_budget_pct)
        return 0;
    for (size_t i = 0; i < a->request_headers.count; i++)
        if (!str_eq(a->request_headers.items[i], b->request_headers.items[i]))
            return 0;
    for (size_t i = 0; i < a->assignments.count; i++)
        if (!assignment_eq(&a->assignments.items[i], &b->assignments.items[i]))
            return 0;
    for (size_t i = 0; i < a->thresholds.count; i++)
        if (!threshold_eq(&a->thresholds.items[i], &b->thresholds.items[i]))
            return 0;
    return 1;
}
