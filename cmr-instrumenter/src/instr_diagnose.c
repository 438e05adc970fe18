/*
 * instr_diagnose.c - diagnoses' Discover step over the class cache (instr_diagnose.h).
 */
#include "cmr/instr_diagnose.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/buf.h"
#include "cmr/diagnoses.h"
#include "cmr/ids.h"
#include "cmr/log.h"

/* the wire's enums mirror the engine's */
_Static_assert(CMR_DIAG_VIA_ROOT == (int)CMR_DISC_ROOT && CMR_DIAG_VIA_STATIC == (int)CMR_DISC_STATIC &&
                   CMR_DIAG_VIA_SPECIAL == (int)CMR_DISC_SPECIAL && CMR_DIAG_VIA_VIRTUAL == (int)CMR_DISC_VIRTUAL &&
                   CMR_DIAG_VIA_INTERFACE == (int)CMR_DISC_INTERFACE && CMR_DIAG_VIA_LAMBDA == (int)CMR_DISC_LAMBDA &&
                   CMR_DIAG_VIA_DYNAMIC == (int)CMR_DISC_DYNAMIC,
               "DiagnosisVia = cmr_disc_via_t");
_Static_assert(CMR_DIAG_NODE_FOUND == (int)CMR_DISC_FOUND && CMR_DIAG_NODE_NOT_LOADED == (int)CMR_DISC_NOT_LOADED &&
                   CMR_DIAG_NODE_JDK == (int)CMR_DISC_JDK && CMR_DIAG_NODE_EXCLUDED == (int)CMR_DISC_EXCLUDED &&
                   CMR_DIAG_NODE_NO_CODE == (int)CMR_DISC_NO_CODE && CMR_DIAG_NODE_REPEATED == (int)CMR_DISC_REPEATED &&
                   CMR_DIAG_NODE_DEPTH == (int)CMR_DISC_DEPTH && CMR_DIAG_NODE_TOO_MANY == (int)CMR_DISC_TOO_MANY,
               "DiagnosisNodeStatus = cmr_disc_status_t");

/* --- the agent's classes, one per name ------------------------------------------------ */

typedef struct agent_class {
    char *name;
    int64_t loader;
    uint64_t hash;
} agent_class_t;

typedef struct agent_classes {
    agent_class_t *items;
    size_t n, cap;
    int oom;
} agent_classes_t;

static int collect_class(int64_t loader, const char *name, const cmr_instr_class_rec_t *r, void *ud)
{
    agent_classes_t *l = ud;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        agent_class_t *p = realloc(l->items, cap * sizeof *p);
        if (!p) {
            l->oom = 1;
            return 1;
        }
        l->items = p;
        l->cap = cap;
    }
    char *copy = strdup(name);
    if (!copy) {
        l->oom = 1;
        return 1;
    }
    l->items[l->n++] = (agent_class_t){copy, loader, r->hash};
    return 0;
}

static int by_name_loader(const void *a, const void *b)
{
    const agent_class_t *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->loader > y->loader) - (x->loader < y->loader);
}

static void agent_classes_free(agent_classes_t *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->items[i].name);
    free(l->items);
    *l = (agent_classes_t){0};
}

/* The agent's classes sorted by name (then loader); 0 or -1. */
static int agent_classes(cmr_instr_cache_t *c, uint64_t agent, agent_classes_t *out)
{
    *out = (agent_classes_t){0};
    int rc = cmr_instr_cache_each_class(c, agent, collect_class, out);
    if (out->oom || rc < 0) {
        agent_classes_free(out);
        return -1;
    }
    if (out->n)
        qsort(out->items, out->n, sizeof *out->items, by_name_loader);
    return 0;
}

/* --- the source ------------------------------------------------------------------------ */

static int src_class_bytes(void *ud, const char *name, cmr_buf_t *out)
{
    cmr_instr_diag_src_t *s = ud;
    cmr_instr_class_rec_t rec;
    uint64_t hash = 0;
    int r = s->have_loader ? cmr_instr_cache_class(s->cache, s->agent, s->loader, name, &rec) : 0;
    if (r < 0)
        return -1;
    if (r == 1)
        hash = rec.hash;
    else if ((r = cmr_instr_cache_type(s->cache, s->agent, name, &hash)) != 1)
        return r < 0 ? -1 : 0;
    cmr_buf_t b = {0};
    r = cmr_instr_cache_bytes(s->cache, hash, &b);
    if (r == 1) {
        cmr_buf_put(out, b.data, b.len);
        if (!cmr_buf_ok(out))
            r = -1;
    }
    cmr_buf_free(&b);
    return r < 0 ? -1 : r;
}

static int src_each_class(void *ud,
                          int (*fn)(void *fnud, const char *name, const char *super, const char *const *ifaces,
                                    size_t nifaces),
                          void *fnud)
{
    cmr_instr_diag_src_t *s = ud;
    agent_classes_t l;
    if (agent_classes(s->cache, s->agent, &l) != 0)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < l.n && rc == 0; i++) {
        if (i && strcmp(l.items[i].name, l.items[i - 1].name) == 0)
            continue; /* one per name: the first loader's */
        cmr_instr_meta_t m = {0};
        int have = cmr_instr_cache_meta(s->cache, l.items[i].hash, &m);
        if (have < 0)
            rc = -1;
        else if (have == 1)
            rc = fn(fnud, l.items[i].name, m.super_name, (const char *const *)m.interfaces.items, m.interfaces.count);
        else
            rc = fn(fnud, l.items[i].name, NULL, NULL, 0);
        cmr_instr_meta_free(&m);
    }
    agent_classes_free(&l);
    return rc;
}

void cmr_instr_diag_source(cmr_instr_diag_src_t *s, cmr_disc_source_t *out)
{
    *out = (cmr_disc_source_t){.ud = s, .class_bytes = src_class_bytes, .each_class = src_each_class};
}

/* --- one tree ------------------------------------------------------------------------- */

void cmr_instr_diag_tree_free(cmr_diagnosis_tree_t *t)
{
    if (!t)
        return;
    free(t->diagnosis_id);
    free(t->environment_id);
    free(t->error);
    for (size_t i = 0; i < t->nodes.count; i++) {
        free(t->nodes.items[i].class_name);
        free(t->nodes.items[i].method_name);
        free(t->nodes.items[i].descriptor);
        free(t->nodes.items[i].note);
    }
    free(t->nodes.items);
    *t = (cmr_diagnosis_tree_t){0};
}

/* The selected method of a threshold's diagnosis (method id only): its class, name and
 * descriptor among the agent's classes. 1 found (strings allocated), 0 not, -1 error. */
static int resolve_method_id(cmr_instr_cache_t *c, const agent_classes_t *l, int64_t method_id, char **owner,
                             char **name, char **desc)
{
    int rc = 0;
    for (size_t i = 0; i < l->n && rc == 0; i++) {
        if (i && strcmp(l->items[i].name, l->items[i - 1].name) == 0)
            continue;
        cmr_instr_meta_t m = {0};
        int have = cmr_instr_cache_meta(c, l->items[i].hash, &m);
        if (have < 0)
            rc = -1;
        for (size_t j = 0; have == 1 && j < m.n_methods && rc == 0; j++) {
            if ((int64_t)cmr_method_id(m.name, m.methods[j].name, m.methods[j].desc) != method_id)
                continue;
            *owner = strdup(m.name);
            *name = strdup(m.methods[j].name);
            *desc = strdup(m.methods[j].desc);
            rc = *owner && *name && *desc ? 1 : -1;
        }
        cmr_instr_meta_free(&m);
    }
    return rc;
}

static int set_error(cmr_diagnosis_tree_t *t, const char *msg)
{
    free(t->error);
    t->error = strdup(msg);
    return t->error ? 0 : -1;
}

/* The note of a node (allocated): for an EXCLUDED one, who excluded it. */
static char *exclusion_note(const cmr_disc_opts_t *o, const cmr_disc_node_t *n)
{
    if (n->status != CMR_DISC_EXCLUDED)
        return strdup("");
    long e = cmr_disc_excluded_by(o, n->owner ? n->owner : "", n->name ? n->name : "", n->desc ? n->desc : "");
    if (e >= 0 && cmr_disc_exclude_is_method(o->exclude[e]))
        return strdup(CMR_INSTR_DIAG_NOTE_OPERATOR);
    if (e < 0)
        return strdup("a class the instrumenter never instruments");
    size_t len = strlen(o->exclude[e]) + 64;
    char *note = malloc(len);
    if (note)
        snprintf(note, len, "its class is on the diagnosis' exclude list (%s)", o->exclude[e]);
    return note;
}

int cmr_instr_diag_tree(cmr_instr_cache_t *cache, uint64_t agent, const cmr_diagnosis_t *d, int64_t now_ms,
                        cmr_diagnosis_tree_t *out)
{
    *out = (cmr_diagnosis_tree_t){0};
    out->diagnosis_id = strdup(d->id ? d->id : "");
    out->environment_id = strdup(d->environment_id ? d->environment_id : "");
    out->error = strdup("");
    out->revision = d->revision;
    out->agent_id = (int64_t)agent;
    out->time_ms = now_ms;
    if (!out->diagnosis_id || !out->environment_id || !out->error) {
        cmr_instr_diag_tree_free(out);
        return -1;
    }
    agent_classes_t l;
    if (agent_classes(cache, agent, &l) != 0) {
        if (set_error(out, "the class cache could not be read") == 0)
            return 0;
        cmr_instr_diag_tree_free(out);
        return -1;
    }
    int rc = 0;
    char *owner = NULL, *name = NULL, *desc = NULL;
    if (d->class_name && d->class_name[0]) {
        owner = strdup(d->class_name);
        name = strdup(d->method_name ? d->method_name : "");
        desc = d->descriptor && d->descriptor[0] ? strdup(d->descriptor) : NULL;
        if (!owner || !name || (d->descriptor && d->descriptor[0] && !desc))
            rc = -1;
    } else {
        int found = resolve_method_id(cache, &l, d->method_id, &owner, &name, &desc);
        if (found < 0)
            rc = set_error(out, "the class cache could not be read");
        else if (found == 0)
            rc = set_error(out, "method not found");
        if (found != 1)
            goto out;
    }
    if (rc != 0)
        goto out;
    /* the selected method's class as this agent loaded it: its loader is preferred */
    cmr_instr_diag_src_t s = {.cache = cache, .agent = agent};
    for (size_t i = 0; i < l.n; i++)
        if (strcmp(l.items[i].name, owner) == 0) {
            s.loader = l.items[i].loader;
            s.have_loader = true;
            break;
        }
    if (!s.have_loader) {
        rc = set_error(out, "the selected method's class was never loaded by this agent");
        goto out;
    }
    cmr_disc_source_t src;
    cmr_instr_diag_source(&s, &src);
    cmr_disc_opts_t o = {.max_depth = d->depth > 0 ? d->depth : 0,
                         .include_jdk = d->include_jdk,
                         .exclude = (const char *const *)d->exclude.items,
                         .nexclude = d->exclude.count};
    cmr_disc_tree_t t = {0};
    char err[256] = "";
    if (cmr_disc_discover(&src, owner, name, desc, &o, &t, err, sizeof err) != 0) {
        rc = set_error(out, err[0] ? err : "discovery failed");
        goto out;
    }
    out->classes_read = t.classes_read > INT32_MAX ? INT32_MAX : (int32_t)t.classes_read;
    out->truncated = t.truncated;
    out->nodes.items = t.n ? calloc(t.n, sizeof *out->nodes.items) : NULL;
    if (t.n && !out->nodes.items)
        rc = -1;
    for (size_t i = 0; rc == 0 && i < t.n; i++) {
        const cmr_disc_node_t *n = &t.nodes[i];
        cmr_diag_node_t *x = &out->nodes.items[out->nodes.count++];
        x->method_id = (int64_t)n->method_id;
        x->class_name = strdup(n->owner ? n->owner : "");
        x->method_name = strdup(n->name ? n->name : "");
        x->descriptor = strdup(n->desc ? n->desc : "");
        x->parent = n->parent == UINT32_MAX ? -1 : (int32_t)n->parent;
        x->depth = n->depth;
        x->via = (cmr_diag_via_t)n->via;
        x->status = (cmr_diag_node_status_t)n->status;
        x->call_sites = n->call_sites > INT32_MAX ? INT32_MAX : (int32_t)n->call_sites;
        x->probe = CMR_DIAG_PROBE_NONE; /* the worker marks them (cmr_instr_diag_mark) */
        x->note = exclusion_note(&o, n);
        if (!x->class_name || !x->method_name || !x->descriptor || !x->note)
            rc = -1;
    }
    cmr_disc_tree_free(&t);
out:
    free(owner);
    free(name);
    free(desc);
    agent_classes_free(&l);
    if (rc != 0)
        cmr_instr_diag_tree_free(out);
    return rc;
}

/* --- the queue ------------------------------------------------------------------------ */

typedef struct job {
    char id[24];
    int64_t revision;
    uint64_t agent;
} job_t;

typedef struct handled {
    char id[24];
    int64_t revision;
} handled_t;

/* One method of an overlay (instr_diagnose.h). */
typedef struct ov_entry {
    char id[24];
    uint64_t agent;
    char *cls, *name, *desc; /* owned */
    cmr_sensor_kind_t sensor;
} ov_entry_t;

/* The tree an agent got for a diagnosis: its revision, and whether it was one (no error). */
typedef struct agent_done {
    char id[24];
    int64_t revision;
    uint64_t agent;
    bool ok;
} agent_done_t;

/* Active diagnoses are planned again this often: agents that started since, and agents
 * whose tree had no root yet (its class not loaded), get one. */
#define REPLAN_MS 10000
/* ... and sooner when a tree waits for class bytes the agent was asked for */
#define RETRY_MS 2000

struct cmr_instr_diag {
    cmr_diagnoses_t *diagnoses;
    ov_entry_t *ov;
    size_t nov, capov;
    agent_done_t *done;
    size_t ndone, capdone;
    int64_t next_replan_ms;
    handled_t *handled;
    size_t nhandled, caphandled;
    job_t *jobs;
    size_t njobs, capjobs, next; /* jobs[next..njobs) to run */
};

cmr_instr_diag_t *cmr_instr_diag_new(void)
{
    cmr_instr_diag_t *q = calloc(1, sizeof *q);
    if (q && !(q->diagnoses = cmr_diagnoses_new())) {
        free(q);
        q = NULL;
    }
    return q;
}

void cmr_instr_diag_free(cmr_instr_diag_t *q)
{
    if (!q)
        return;
    cmr_diagnoses_free(q->diagnoses);
    for (size_t i = 0; i < q->nov; i++) {
        free(q->ov[i].cls);
        free(q->ov[i].name);
        free(q->ov[i].desc);
    }
    free(q->ov);
    free(q->done);
    free(q->handled);
    free(q->jobs);
    free(q);
}

int cmr_instr_diag_apply(cmr_instr_diag_t *q, const void *payload, size_t len, char *err, size_t errlen)
{
    return cmr_diagnoses_apply(q->diagnoses, payload, len, err, errlen);
}

static bool is_handled(const cmr_instr_diag_t *q, const char *id, int64_t revision)
{
    for (size_t i = 0; i < q->nhandled; i++)
        if (q->handled[i].revision == revision && strcmp(q->handled[i].id, id) == 0)
            return true;
    return false;
}

static int add_handled(cmr_instr_diag_t *q, const char *id, int64_t revision)
{
    /* one entry per id: a newer revision replaces the older */
    for (size_t i = 0; i < q->nhandled; i++)
        if (strcmp(q->handled[i].id, id) == 0) {
            q->handled[i].revision = revision;
            return 0;
        }
    if (q->nhandled == q->caphandled) {
        size_t cap = q->caphandled ? q->caphandled * 2 : 16;
        handled_t *p = realloc(q->handled, cap * sizeof *p);
        if (!p)
            return -1;
        q->handled = p;
        q->caphandled = cap;
    }
    handled_t *h = &q->handled[q->nhandled++];
    snprintf(h->id, sizeof h->id, "%s", id);
    h->revision = revision;
    return 0;
}

static int add_job(cmr_instr_diag_t *q, const cmr_diagnosis_t *d, uint64_t agent)
{
    if (q->njobs == q->capjobs) {
        size_t cap = q->capjobs ? q->capjobs * 2 : 16;
        job_t *p = realloc(q->jobs, cap * sizeof *p);
        if (!p)
            return -1;
        q->jobs = p;
        q->capjobs = cap;
    }
    job_t *j = &q->jobs[q->njobs++];
    snprintf(j->id, sizeof j->id, "%s", d->id);
    j->revision = d->revision;
    j->agent = agent;
    return 0;
}

typedef struct plan_ctx {
    cmr_instr_diag_t *q;
    const cmr_diagnosis_t *d;
    cmr_instr_diag_owned_fn *owned;
    void *ud;
    bool replan;
    int oom;
} plan_ctx_t;

static agent_done_t *find_done(cmr_instr_diag_t *q, const char *id, uint64_t agent)
{
    for (size_t i = 0; i < q->ndone; i++)
        if (q->done[i].agent == agent && strcmp(q->done[i].id, id) == 0)
            return &q->done[i];
    return NULL;
}

/* Notes the tree an agent got; returns whether it must be sent: always, except an error
 * again where this revision's error was sent already (a replan retrying). */
static bool note_done(cmr_instr_diag_t *q, const char *id, int64_t revision, uint64_t agent, bool ok)
{
    agent_done_t *d = find_done(q, id, agent);
    if (!d) {
        if (CMR_ARRAY_GROW(q->done, q->capdone, q->ndone + 1) != 0)
            return true;
        d = &q->done[q->ndone++];
        *d = (agent_done_t){.agent = agent, .revision = -1};
        snprintf(d->id, sizeof d->id, "%s", id);
    }
    bool send = ok || d->revision != revision || d->ok;
    d->revision = revision;
    d->ok = ok;
    return send;
}

static int plan_agent(uint64_t agent, const cmr_instr_agent_rec_t *r, void *ud)
{
    plan_ctx_t *x = ud;
    if (strcmp(r->env_id, x->d->environment_id ? x->d->environment_id : "") != 0)
        return 0;
    if (x->d->agents.len >= 8) { /* only the listed agents */
        bool listed = false;
        for (size_t i = 0; i + 8 <= x->d->agents.len && !listed; i += 8) {
            uint64_t a = 0;
            for (int k = 0; k < 8; k++)
                a = a << 8 | x->d->agents.data[i + (size_t)k];
            listed = a == agent;
        }
        if (!listed)
            return 0;
    }
    if (x->owned && !x->owned(agent, r, x->ud))
        return 0;
    const agent_done_t *done = find_done(x->q, x->d->id, agent);
    if (x->replan && done && done->revision == x->d->revision && done->ok)
        return 0; /* a replan: only agents without a tree of this revision */
    if (add_job(x->q, x->d, agent) != 0) {
        x->oom = 1;
        return 1;
    }
    return 0;
}

/* Jobs for every ACTIVE revision not handled yet, and, every REPLAN_MS, for the agents of
 * active ones that have no tree of their revision yet. 0 or -1. */
static int plan(cmr_instr_diag_t *q, cmr_instr_cache_t *cache, cmr_instr_diag_owned_fn *owned, void *ud, int64_t now_ms)
{
    q->njobs = q->next = 0;
    bool replan = now_ms >= q->next_replan_ms;
    if (replan)
        q->next_replan_ms = now_ms + REPLAN_MS;
    for (size_t i = 0; i < cmr_diagnoses_count(q->diagnoses); i++) {
        const cmr_diagnosis_t *d = cmr_diagnoses_at(q->diagnoses, i);
        bool fresh = !is_handled(q, d->id, d->revision);
        if (d->state != CMR_DIAG_ACTIVE || (!fresh && !replan))
            continue;
        size_t before = q->njobs;
        plan_ctx_t x = {q, d, owned, ud, !fresh, 0};
        if (cmr_instr_cache_each_agent(cache, plan_agent, &x) < 0 || x.oom)
            return -1;
        if (add_handled(q, d->id, d->revision) != 0)
            return -1;
        if (fresh || q->njobs > before)
            cmr_log(CMR_LOG_DEBUG, "instr.diagnosis", "id=%s revision=%" PRId64 " environment=%s agents=%zu%s", d->id,
                    d->revision, d->environment_id, q->njobs - before, fresh ? "" : " (agents without a tree)");
    }
    return 0;
}

int cmr_instr_diag_step(cmr_instr_diag_t *q, cmr_instr_cache_t *cache, cmr_instr_diag_owned_fn *owned, void *ud,
                        int64_t now_ms, cmr_diagnosis_tree_t *out)
{
    if (q->next == q->njobs && plan(q, cache, owned, ud, now_ms) != 0)
        return -1;
    while (q->next < q->njobs) {
        const job_t *j = &q->jobs[q->next++];
        const cmr_diagnosis_t *d = cmr_diagnoses_get(q->diagnoses, j->id);
        if (!d || d->revision != j->revision || d->state != CMR_DIAG_ACTIVE)
            continue; /* changed since: its newer revision is planned next */
        if (cmr_instr_diag_tree(cache, j->agent, d, now_ms, out) != 0)
            return -1;
        if (!note_done(q, d->id, d->revision, j->agent, !out->error[0])) {
            cmr_instr_diag_tree_free(out); /* the same error as before: said already */
            continue;
        }
        cmr_log(CMR_LOG_INFO, "instr.diagnosis_tree",
                "id=%s revision=%" PRId64 " agent=%016" PRIx64 " nodes=%zu classes_read=%d error=\"%s\"", d->id,
                d->revision, j->agent, out->nodes.count, out->classes_read, out->error);
        return 1;
    }
    return 0;
}

/* --- the overlay ------------------------------------------------------------------------ */

void cmr_instr_diag_classes_free(cmr_instr_diag_classes_t *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->items[i].name);
    free(l->items);
    *l = (cmr_instr_diag_classes_t){0};
}

/* Adds (agent, name) to l once. 0 or -1. */
static int classes_add(cmr_instr_diag_classes_t *l, uint64_t agent, const char *name)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->items[i].agent == agent && strcmp(l->items[i].name, name) == 0)
            return 0;
    if (CMR_ARRAY_GROW(l->items, l->cap, l->n + 1) != 0)
        return -1;
    char *copy = strdup(name);
    if (!copy)
        return -1;
    l->items[l->n++] = (cmr_instr_diag_class_t){agent, copy};
    return 0;
}

/* Removes the overlay entries of (id, agent) (agent 0: every agent), adding their classes
 * to changed. 0 or -1. */
static int ov_remove(cmr_instr_diag_t *q, const char *id, uint64_t agent, bool any_agent,
                     cmr_instr_diag_classes_t *changed)
{
    int rc = 0;
    size_t k = 0;
    for (size_t i = 0; i < q->nov; i++) {
        ov_entry_t *e = &q->ov[i];
        if (strcmp(e->id, id) == 0 && (any_agent || e->agent == agent)) {
            if (rc == 0 && classes_add(changed, e->agent, e->cls) != 0)
                rc = -1;
            free(e->cls);
            free(e->name);
            free(e->desc);
            continue;
        }
        q->ov[k++] = *e;
    }
    q->nov = k;
    return rc;
}

int cmr_instr_diag_set_overlay(cmr_instr_diag_t *q, const cmr_diagnosis_tree_t *t, cmr_instr_diag_classes_t *changed)
{
    uint64_t agent = (uint64_t)t->agent_id;
    if (ov_remove(q, t->diagnosis_id, agent, false, changed) != 0)
        return -1;
    if ((t->error && t->error[0]) || cmr_diag_id_number(t->diagnosis_id) == 0)
        return 0; /* (an id the agents could not tell apart from "none": no probes) */
    for (size_t i = 0; i < t->nodes.count; i++) {
        const cmr_diag_node_t *n = &t->nodes.items[i];
        if (n->status != CMR_DIAG_NODE_FOUND)
            continue;
        if (CMR_ARRAY_GROW(q->ov, q->capov, q->nov + 1) != 0)
            return -1;
        ov_entry_t *e = &q->ov[q->nov];
        *e = (ov_entry_t){.agent = agent,
                          .cls = strdup(n->class_name),
                          .name = strdup(n->method_name),
                          .desc = strdup(n->descriptor),
                          .sensor = n->parent < 0 ? CMR_SENSOR_ANCHOR : CMR_SENSOR_CONDITIONAL};
        snprintf(e->id, sizeof e->id, "%s", t->diagnosis_id);
        if (!e->cls || !e->name || !e->desc) {
            free(e->cls);
            free(e->name);
            free(e->desc);
            return -1;
        }
        q->nov++;
        if (classes_add(changed, agent, n->class_name) != 0)
            return -1;
    }
    return 0;
}

int cmr_instr_diag_take_ended(cmr_instr_diag_t *q, cmr_instr_diag_classes_t *changed)
{
    for (size_t i = 0; i < q->nov;) {
        const cmr_diagnosis_t *d = cmr_diagnoses_get(q->diagnoses, q->ov[i].id);
        if (d && d->state == CMR_DIAG_ACTIVE) {
            i++;
            continue;
        }
        char id[24];
        snprintf(id, sizeof id, "%s", q->ov[i].id);
        cmr_log(CMR_LOG_INFO, "instr.diagnosis_removed", "id=%s state=%s", id, d ? "ended" : "unknown");
        /* its agents' tree records go too: replans only look at active diagnoses */
        size_t k = 0;
        for (size_t j = 0; j < q->ndone; j++)
            if (strcmp(q->done[j].id, id) != 0)
                q->done[k++] = q->done[j];
        q->ndone = k;
        if (ov_remove(q, id, 0, true, changed) != 0)
            return -1;
        i = 0; /* entries moved */
    }
    return 0;
}

int cmr_instr_diag_overlay(cmr_instr_diag_t *q, uint64_t agent, const cmr_instr_meta_t *meta,
                           const cmr_instr_decision_t *env, cmr_instr_decision_t *full, const cmr_diagnosis_t **diag)
{
    *diag = NULL;
    *full = (cmr_instr_decision_t){.excluded = env->excluded};
    size_t cap = env->n_picks + 1;
    const char *chosen = NULL; /* the lowest id with an active overlay in this class */
    if (!env->excluded)
        for (size_t i = 0; i < q->nov; i++) {
            const ov_entry_t *e = &q->ov[i];
            if (e->agent != agent || strcmp(e->cls, meta->name) != 0 || (chosen && strcmp(e->id, chosen) >= 0))
                continue;
            const cmr_diagnosis_t *d = cmr_diagnoses_get(q->diagnoses, e->id);
            if (d && d->state == CMR_DIAG_ACTIVE)
                chosen = e->id;
        }
    if (chosen)
        for (size_t i = 0; i < q->nov; i++)
            cap += q->ov[i].agent == agent && strcmp(q->ov[i].id, chosen) == 0;
    full->picks = calloc(cap, sizeof *full->picks);
    if (!full->picks)
        return -1;
    memcpy(full->picks, env->picks, env->n_picks * sizeof *env->picks);
    full->n_picks = env->n_picks;
    if (!chosen)
        return 0;
    /* an arg:N condition: the anchor's probe gets parameter N */
    const cmr_diagnosis_t *cd = cmr_diagnoses_get(q->diagnoses, chosen);
    uint8_t anchor_arg = 0;
    for (size_t c = 0; cd && c < cd->conditions.count; c++) {
        const cmr_diag_condition_t *k = &cd->conditions.items[c];
        if (k->kind == CMR_DIAG_ARGUMENT && k->name[0] >= '0' && k->name[0] <= '0' + CMR_ANCHOR_MAX_ARG && !k->name[1])
            anchor_arg = (uint8_t)(k->name[0] - '0' + 1);
    }
    size_t added = 0;
    for (size_t i = 0; i < q->nov; i++) {
        const ov_entry_t *e = &q->ov[i];
        if (e->agent != agent || strcmp(e->id, chosen) != 0 || strcmp(e->cls, meta->name) != 0)
            continue;
        long m = cmr_instr_meta_find_method(meta, e->name, e->desc);
        if (m < 0)
            continue; /* another version of the class than the tree read */
        cmr_instr_pick_t *p = NULL;
        for (size_t k = 0; k < full->n_picks && !p; k++)
            if (full->picks[k].method == (uint16_t)m)
                p = &full->picks[k];
        if (p) {
            if (p->handoff == CMR_HANDOFF_NONE && e->sensor == CMR_SENSOR_ANCHOR &&
                (p->sensor != CMR_SENSOR_ANCHOR || p->arg != anchor_arg)) {
                p->sensor = CMR_SENSOR_ANCHOR;
                p->arg = anchor_arg;
                added++;
            }
            continue;
        }
        full->picks[full->n_picks++] = (cmr_instr_pick_t){(uint16_t)m, e->sensor, CMR_HANDOFF_NONE,
                                                          e->sensor == CMR_SENSOR_ANCHOR ? anchor_arg : 0};
        added++;
    }
    if (added)
        *diag = cmr_diagnoses_get(q->diagnoses, chosen);
    return 0;
}

int cmr_instr_diag_each_recent_env(cmr_instr_diag_t *q, int64_t since_ms, int (*fn)(const char *env_id, void *ud),
                                   void *ud)
{
    for (size_t i = 0; i < cmr_diagnoses_count(q->diagnoses); i++) {
        const cmr_diagnosis_t *d = cmr_diagnoses_at(q->diagnoses, i);
        int64_t ended = d->ended_ms > d->time_ms ? d->ended_ms : d->time_ms; /* (a revision without ended_ms) */
        if (d->state != CMR_DIAG_ACTIVE && ended < since_ms)
            continue;
        int rc = fn(d->environment_id ? d->environment_id : "", ud);
        if (rc)
            return rc;
    }
    return 0;
}

void cmr_instr_diag_retry(cmr_instr_diag_t *q, const char *id, uint64_t agent, int64_t now_ms)
{
    agent_done_t *d = find_done(q, id, agent);
    if (d)
        d->ok = false;
    if (q->next_replan_ms > now_ms + RETRY_MS)
        q->next_replan_ms = now_ms + RETRY_MS;
}

const cmr_diagnosis_t *cmr_instr_diag_get(cmr_instr_diag_t *q, const char *id)
{
    return cmr_diagnoses_get(q->diagnoses, id);
}
