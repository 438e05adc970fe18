/*
 * agent_diagnoses.c - the diagnoses running in this JVM (agent_diagnoses.h).
 *
 * A small table: a JVM runs few diagnoses at a time (one per selected method at most, each
 * over the classes of its discovered methods), so lookups are linear scans.
 */
#include "agent_diagnoses.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/buf.h"
#include "cmr/log.h"
#include "cmr/trust.h"

uint64_t cmr_agent_digest8_of(const uint8_t digest[32])
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | digest[i];
    return v;
}

uint64_t cmr_agent_digest8(const uint8_t *bytes, size_t len)
{
    uint8_t d[CMR_TRUST_DIGEST_BYTES];
    cmr_trust_digest(bytes, len, d);
    return cmr_agent_digest8_of(d);
}

typedef struct anchor {
    int64_t method_id;
} anchor_t;

typedef struct diag {
    int64_t id, revision, end_ms, max_hits;
    double budget_pct;
    cmr_diag_condition_t *conds; /* owned copies */
    size_t nconds;
    anchor_t *anchors;
    size_t nanchors, capanchors;
    cmr_agent_diag_restore_t *classes; /* the classes carrying its probes now */
    size_t nclasses, capclasses;
    cmr_diagnosis_run_t run;
    int64_t anchor_ns; /* time the anchors ran in its context */
    bool ending;       /* the agent is restoring its classes */
    bool ended_by_agent;
} diag_t;

/* Diagnoses the agent ended itself, remembered apart from the runs (which make room for new
 * ones): their commands stay refused for the JVM's life, up to this many. */
#define ENDED_IDS 1024

struct cmr_agent_diags {
    pthread_mutex_t lock;
    int64_t ended_ids[ENDED_IDS];
    size_t nended; /* ring: the oldest is overwritten past ENDED_IDS */
    diag_t *items;
    size_t n, cap;
    size_t restore_bytes;
    bool changed;
    _Atomic uint64_t control[8]; /* [0]: the anchors' generation */
};

cmr_agent_diags_t *cmr_agent_diags_new(void)
{
    cmr_agent_diags_t *d = calloc(1, sizeof *d);
    if (d)
        pthread_mutex_init(&d->lock, NULL);
    return d;
}

static void free_conds(diag_t *g)
{
    for (size_t i = 0; i < g->nconds; i++) {
        free(g->conds[i].name);
        free(g->conds[i].pattern);
    }
    free(g->conds);
    g->conds = NULL;
    g->nconds = 0;
}

static void free_class(cmr_agent_diags_t *d, cmr_agent_diag_restore_t *c)
{
    d->restore_bytes -= c->len;
    free(c->class_name);
    free(c->bytes);
}

static void free_classes(cmr_agent_diags_t *d, diag_t *g)
{
    for (size_t i = 0; i < g->nclasses; i++)
        free_class(d, &g->classes[i]);
    free(g->classes);
    g->classes = NULL;
    g->nclasses = g->capclasses = 0;
}

static void free_diag(cmr_agent_diags_t *d, diag_t *g)
{
    free_conds(g);
    free(g->anchors);
    free_classes(d, g);
}

void cmr_agent_diags_free(cmr_agent_diags_t *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->n; i++)
        free_diag(d, &d->items[i]);
    free(d->items);
    pthread_mutex_destroy(&d->lock);
    free(d);
}

void *cmr_agent_diags_control(cmr_agent_diags_t *d)
{
    return (void *)d->control;
}

static void bump(cmr_agent_diags_t *d)
{
    atomic_fetch_add_explicit(&d->control[0], 1, memory_order_release);
}

static diag_t *find(cmr_agent_diags_t *d, int64_t id)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->items[i].id == id)
            return &d->items[i];
    return NULL;
}

/* Room for one more run: the oldest ended one goes when the table is full. NULL when
 * every slot holds an active diagnosis. */
static diag_t *new_slot(cmr_agent_diags_t *d)
{
    if (d->n == CMR_DIAG_MAX_RUNS) {
        size_t oldest = SIZE_MAX;
        for (size_t i = 0; i < d->n; i++)
            if (d->items[i].run.state == CMR_DIAG_ENDED &&
                (oldest == SIZE_MAX || d->items[i].run.ended_ms < d->items[oldest].run.ended_ms))
                oldest = i;
        if (oldest == SIZE_MAX)
            return NULL;
        free_diag(d, &d->items[oldest]);
        memmove(&d->items[oldest], &d->items[oldest + 1], (d->n - oldest - 1) * sizeof *d->items);
        d->n--;
    }
    if (CMR_ARRAY_GROW(d->items, d->cap, d->n + 1) != 0)
        return NULL;
    diag_t *g = &d->items[d->n++];
    memset(g, 0, sizeof *g);
    return g;
}

/* Replaces g's conditions with copies of s's, or leaves them as they were (-1: memory). */
static int copy_conds(diag_t *g, const cmr_diagnosis_scope_t *s)
{
    size_t n = s->conditions.count;
    cmr_diag_condition_t *c = n ? calloc(n, sizeof *c) : NULL;
    int rc = n && !c ? -1 : 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const cmr_diag_condition_t *from = &s->conditions.items[i];
        c[i].kind = from->kind;
        c[i].name = strdup(from->name ? from->name : "");
        c[i].pattern = strdup(from->pattern ? from->pattern : "");
        if (!c[i].name || !c[i].pattern)
            rc = -1;
    }
    if (rc != 0) {
        for (size_t i = 0; c && i < n; i++) {
            free(c[i].name);
            free(c[i].pattern);
        }
        free(c);
        return -1;
    }
    free_conds(g);
    g->conds = c;
    g->nconds = n;
    return 0;
}

static int add_anchor(diag_t *g, int64_t method_id)
{
    for (size_t i = 0; i < g->nanchors; i++)
        if (g->anchors[i].method_id == method_id)
            return 0;
    if (CMR_ARRAY_GROW(g->anchors, g->capanchors, g->nanchors + 1) != 0)
        return -1;
    g->anchors[g->nanchors++].method_id = method_id;
    return 0;
}

static bool ended_here(const cmr_agent_diags_t *d, int64_t id)
{
    size_t n = d->nended < ENDED_IDS ? d->nended : ENDED_IDS;
    for (size_t i = 0; i < n; i++)
        if (d->ended_ids[i] == id)
            return true;
    return false;
}

int cmr_agent_diags_begin(cmr_agent_diags_t *d, const cmr_redefine_t *cmd, int64_t now_ms, char *why, size_t whylen)
{
    const cmr_diagnosis_scope_t *s = cmd->diagnosis;
    int rc = 0;
    pthread_mutex_lock(&d->lock);
    diag_t *g = find(d, s->id);
    if (s->id == 0) {
        snprintf(why, whylen, "the command names no diagnosis id");
        rc = -1;
    } else if (ended_here(d, s->id)) {
        snprintf(why, whylen, "diagnosis %016" PRIx64 " ended in this JVM already; its probes are not installed again",
                 (uint64_t)s->id);
        rc = -1;
    } else if (s->end_ms > 0 && s->end_ms <= now_ms) {
        snprintf(why, whylen, "diagnosis %016" PRIx64 " is over already (its end time has passed)", (uint64_t)s->id);
        rc = -1;
    } else if (d->restore_bytes + s->restore_bytecode.len > CMR_DIAG_RESTORE_BUDGET) {
        snprintf(why, whylen, "the restore bytes of running diagnoses would exceed %zu MiB",
                 CMR_DIAG_RESTORE_BUDGET >> 20);
        rc = -1;
    } else if (s->restore_bytecode.len == 0) {
        snprintf(why, whylen, "the command carries no restore bytes");
        rc = -1;
    } else {
        if (!g) {
            if (!(g = new_slot(d))) {
                snprintf(why, whylen, "too many diagnoses running in this JVM (%d)", CMR_DIAG_MAX_RUNS);
                rc = -1;
                goto out;
            }
            g->id = s->id;
            g->run = (cmr_diagnosis_run_t){.id = s->id, .state = CMR_DIAG_ACTIVE, .started_ms = now_ms};
            d->changed = true;
            cmr_log(CMR_LOG_INFO, "agent.diagnosis_started",
                    "diagnosis=%016" PRIx64 " revision=%" PRId64 " end_ms=%" PRId64 " max_hits=%" PRId64
                    " budget_pct=%.2f conditions=%zu",
                    (uint64_t)s->id, s->revision, s->end_ms, s->max_hits, s->overhead_budget_pct, s->conditions.count);
        } else if (g->run.state == CMR_DIAG_ENDED) { /* the CMR starts it again */
            g->run.state = CMR_DIAG_ACTIVE;
            g->run.end_reason = CMR_DIAG_END_NONE;
            g->run.ended_ms = 0;
            d->changed = true;
        }
        g->revision = s->revision;
        g->end_ms = s->end_ms;
        g->max_hits = s->max_hits;
        g->budget_pct = s->overhead_budget_pct;
        if (copy_conds(g, s) != 0)
            rc = -1;
        for (size_t i = 0; rc == 0 && i < cmd->methods.count; i++)
            if (cmd->methods.items[i].sensor == CMR_SENSOR_ANCHOR)
                rc = add_anchor(g, cmd->methods.items[i].method_id);
        if (rc != 0)
            snprintf(why, whylen, "out of memory");
        bump(d);
    }
out:
    pthread_mutex_unlock(&d->lock);
    return rc;
}

int cmr_agent_diags_installed(cmr_agent_diags_t *d, const cmr_redefine_t *cmd, int64_t loader_id, uint64_t before)
{
    const cmr_diagnosis_scope_t *s = cmd->diagnosis;
    int rc = -1;
    pthread_mutex_lock(&d->lock);
    diag_t *g = find(d, s->id);
    if (g) {
        cmr_agent_diag_restore_t *c = NULL;
        for (size_t i = 0; i < g->nclasses && !c; i++)
            if (g->classes[i].loader_id == loader_id && strcmp(g->classes[i].class_name, cmd->class_name) == 0)
                c = &g->classes[i];
        if (c) { /* the same class again (a new revision): the newest restore bytes count */
            before = c->before;
            free_class(d, c);
            c->class_name = NULL;
            c->bytes = NULL;
            c->len = 0;
        } else if (d->restore_bytes + s->restore_bytecode.len <= CMR_DIAG_RESTORE_BUDGET &&
                   CMR_ARRAY_GROW(g->classes, g->capclasses, g->nclasses + 1) == 0) {
            c = &g->classes[g->nclasses++]; /* (one copy per loader: each counts) */
        }
        if (c && d->restore_bytes + s->restore_bytecode.len > CMR_DIAG_RESTORE_BUDGET) {
            *c = g->classes[--g->nclasses];
            c = NULL;
        }
        if (c) {
            *c = (cmr_agent_diag_restore_t){.class_name = strdup(cmd->class_name),
                                            .loader_id = loader_id,
                                            .class_hash = cmd->class_hash,
                                            .bytes = malloc(s->restore_bytecode.len),
                                            .len = s->restore_bytecode.len,
                                            .original = s->restore_original,
                                            .before = before};
            if (cmd->original_digest.len == sizeof c->digest)
                memcpy(c->digest, cmd->original_digest.data, sizeof c->digest);
            if (c->class_name && c->bytes) {
                memcpy(c->bytes, s->restore_bytecode.data, c->len);
                d->restore_bytes += c->len;
                rc = 0;
            } else {
                free(c->class_name);
                free(c->bytes);
                *c = g->classes[--g->nclasses];
            }
        }
        g->run.classes = (int32_t)g->nclasses;
    }
    pthread_mutex_unlock(&d->lock);
    return rc;
}

/* A diagnosis whose classes all got other bytes: ended, by the CMR unless the agent is
 * ending it (then cmr_agent_diags_ended says why). */
static void ended_by_cmr(cmr_agent_diags_t *d, diag_t *g, int64_t now_ms)
{
    g->nanchors = 0;
    bump(d);
    if (g->ending)
        return;
    g->run.state = CMR_DIAG_ENDED;
    g->run.end_reason = CMR_DIAG_END_NONE;
    g->run.ended_ms = now_ms;
    d->changed = true;
    cmr_log(CMR_LOG_INFO, "agent.diagnosis_ended",
            "diagnosis=%016" PRIx64 " by=cmr hits=%" PRId64 " calls=%" PRId64 " overhead_pct=%.3f", (uint64_t)g->id,
            g->run.hits, g->run.events, g->run.overhead_pct);
}

void cmr_agent_diags_replaced(cmr_agent_diags_t *d, const char *class_name, int64_t loader_id, int64_t keep_id,
                              uint64_t digest, int64_t now_ms)
{
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < d->n; i++) {
        diag_t *g = &d->items[i];
        if (g->id == keep_id || g->run.state != CMR_DIAG_ACTIVE)
            continue;
        for (size_t k = 0; k < g->nclasses; k++) {
            if (g->classes[k].loader_id != loader_id || strcmp(g->classes[k].class_name, class_name) != 0)
                continue;
            char ename[256];
            cmr_log(CMR_LOG_INFO, "agent.diagnosis_class",
                    "diagnosis=%016" PRIx64 " action=removed by=cmr class=\"%s\" loader=%lld digest=%016" PRIx64
                    " before=%016" PRIx64 " matches_before=%s",
                    (uint64_t)g->id, cmr_log_escape(class_name, ename, sizeof ename), (long long)loader_id, digest,
                    g->classes[k].before, digest == g->classes[k].before ? "true" : "false");
            free_class(d, &g->classes[k]);
            g->classes[k] = g->classes[--g->nclasses];
            g->run.classes = (int32_t)g->nclasses;
            if (g->nclasses == 0)
                ended_by_cmr(d, g, now_ms);
            break;
        }
    }
    pthread_mutex_unlock(&d->lock);
}

static void update_overhead(diag_t *g)
{
    if (g->anchor_ns > 0)
        g->run.overhead_pct = (double)g->run.events * CMR_DIAG_PROBE_PAIR_NS * 100.0 / (double)g->anchor_ns;
}

void cmr_agent_diags_hit(cmr_agent_diags_t *d, int64_t id)
{
    pthread_mutex_lock(&d->lock);
    diag_t *g = find(d, id);
    if (g)
        g->run.hits++;
    pthread_mutex_unlock(&d->lock);
}

void cmr_agent_diags_done(cmr_agent_diags_t *d, int64_t id, uint32_t calls, int64_t ns)
{
    pthread_mutex_lock(&d->lock);
    diag_t *g = find(d, id);
    if (g) {
        g->run.events += calls;
        g->anchor_ns += ns > 0 ? ns : 0;
        update_overhead(g);
    }
    pthread_mutex_unlock(&d->lock);
}

int cmr_agent_diags_due(cmr_agent_diags_t *d, int64_t now_ms, int64_t *id, cmr_diag_end_reason_t *reason)
{
    int found = 0;
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < d->n && !found; i++) {
        diag_t *g = &d->items[i];
        if (g->run.state != CMR_DIAG_ACTIVE || g->ending)
            continue;
        cmr_diag_end_reason_t r = CMR_DIAG_END_NONE;
        if (g->end_ms > 0 && now_ms >= g->end_ms)
            r = CMR_DIAG_END_TIME_TO_LIVE;
        else if (g->max_hits > 0 && g->run.hits >= g->max_hits)
            r = CMR_DIAG_END_HITS;
        else if (g->budget_pct > 0 && g->anchor_ns >= CMR_DIAG_BUDGET_MIN_NS && g->run.overhead_pct > g->budget_pct)
            r = CMR_DIAG_END_BUDGET;
        if (r == CMR_DIAG_END_NONE)
            continue;
        g->ending = true;
        g->nanchors = 0; /* no context opens from now on */
        bump(d);
        *id = g->id;
        *reason = r;
        found = 1;
    }
    pthread_mutex_unlock(&d->lock);
    return found;
}

size_t cmr_agent_diags_restores(cmr_agent_diags_t *d, int64_t id, const cmr_agent_diag_restore_t **out)
{
    pthread_mutex_lock(&d->lock);
    diag_t *g = find(d, id);
    size_t n = g ? g->nclasses : 0;
    *out = g ? g->classes : NULL;
    pthread_mutex_unlock(&d->lock);
    return n;
}

void cmr_agent_diags_ended(cmr_agent_diags_t *d, int64_t id, cmr_diag_end_reason_t reason, int64_t now_ms)
{
    pthread_mutex_lock(&d->lock);
    diag_t *g = find(d, id);
    if (!ended_here(d, id))
        d->ended_ids[d->nended++ % ENDED_IDS] = id;
    if (g) {
        free_classes(d, g);
        g->nanchors = 0;
        g->ending = false;
        g->ended_by_agent = true;
        g->run.state = CMR_DIAG_ENDED;
        g->run.end_reason = reason;
        g->run.ended_ms = now_ms;
        g->run.classes = 0;
        d->changed = true;
        bump(d);
    }
    pthread_mutex_unlock(&d->lock);
}

/* A condition's text for anchors0, which the JVM reads as modified UTF-8 (NewStringUTF):
 * tabs and line ends would split the table and are dropped (cmr-config refuses them); a
 * 4-byte sequence (a character outside the BMP, two UTF-16 units in Java) becomes "??",
 * which a glob matches it with. */
static void put_text(cmr_buf_t *b, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        if (*p == '\t' || *p == '\n') {
            p++;
        } else if (*p >= 0xF0) {
            cmr_buf_put(b, "??", 2);
            p++;
            for (int i = 0; i < 3 && (*p & 0xC0) == 0x80; i++)
                p++;
        } else {
            cmr_buf_put(b, p, 1);
            p++;
        }
    }
}

char *cmr_agent_diags_anchors_text(cmr_agent_diags_t *d)
{
    cmr_buf_t b = {0};
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < d->n; i++) {
        const diag_t *g = &d->items[i];
        if (g->run.state != CMR_DIAG_ACTIVE || g->ending)
            continue;
        for (size_t k = 0; k < g->nanchors; k++) {
            cmr_buf_printf(&b, "%" PRIx64 "\t%" PRIx64, (uint64_t)g->anchors[k].method_id, (uint64_t)g->id);
            for (size_t c = 0; c < g->nconds; c++) {
                /* tabs and line ends cannot be in a condition (cmr-config refuses them);
                 * were they there, they would split the line: dropped */
                cmr_buf_printf(&b, "\t%d\t", (int)g->conds[c].kind);
                put_text(&b, g->conds[c].name);
                cmr_buf_put(&b, "\t", 1);
                put_text(&b, g->conds[c].pattern);
            }
            cmr_buf_put(&b, "\n", 1);
        }
    }
    pthread_mutex_unlock(&d->lock);
    if (!cmr_buf_ok(&b)) {
        cmr_buf_free(&b);
        return NULL;
    }
    return b.data ? (char *)b.data : strdup(""); /* the buffer keeps a NUL after its bytes */
}

size_t cmr_agent_diags_runs(cmr_agent_diags_t *d, cmr_diagnosis_run_t *out, size_t max)
{
    pthread_mutex_lock(&d->lock);
    size_t n = 0;
    for (size_t i = 0; i < d->n && n < max; i++)
        out[n++] = d->items[i].run;
    pthread_mutex_unlock(&d->lock);
    return n;
}

bool cmr_agent_diags_take_changed(cmr_agent_diags_t *d)
{
    pthread_mutex_lock(&d->lock);
    bool c = d->changed;
    d->changed = false;
    pthread_mutex_unlock(&d->lock);
    return c;
}

void cmr_agent_diags_abandon(cmr_agent_diags_t *d, int64_t id, int64_t now_ms)
{
    pthread_mutex_lock(&d->lock);
    diag_t *g = find(d, id);
    if (g && g->run.state == CMR_DIAG_ACTIVE && g->nclasses == 0 && !g->ending)
        ended_by_cmr(d, g, now_ms);
    pthread_mutex_unlock(&d->lock);
}
