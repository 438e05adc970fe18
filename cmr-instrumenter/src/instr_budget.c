/*
 * instr_budget.c - the overhead budget's choice of methods (see instr_budget.h).
 */
#include "cmr/instr_budget.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmr/buf.h"
#include "cmr/classfile.h"

typedef struct cand {
    const cmr_budget_method_t *m;
    double cost_ns; /* calls * (scale * probe_ns + agent_ns) */
} cand_t;

static int by_cost_desc(const void *a, const void *b)
{
    const cand_t *x = a, *y = b;
    if (x->cost_ns != y->cost_ns)
        return x->cost_ns < y->cost_ns ? 1 : -1;
    return x->m->method_id < y->m->method_id ? -1 : x->m->method_id > y->m->method_id;
}

static bool is_listed(const uint64_t *sorted, size_t n, uint64_t id)
{
    return n && bsearch(&id, sorted, n, sizeof id, cmr_u64_cmp) != NULL;
}

/* Whether m counts: it was called, and it has not been removed already. */
static bool counts(const cmr_budget_input_t *in, const cmr_budget_method_t *m)
{
    return m->calls > 0 && !is_listed(in->removed, in->n_removed, m->method_id);
}

/* "probes 90 ns" or "probes 90 ns + agent 30 ns": a call's monitoring cost, in words. */
static void cost_words(const cmr_budget_input_t *in, char *buf, size_t len)
{
    if (in->agent_ns >= 0.5)
        snprintf(buf, len, "probes %.0f ns + agent %.0f ns", in->probe_ns, in->agent_ns);
    else
        snprintf(buf, len, "probes %.0f ns", in->probe_ns);
}

int cmr_budget_select(const cmr_budget_input_t *in, cmr_budget_result_t *out)
{
    memset(out, 0, sizeof *out);
    if (in->cpu_ns <= 0 || in->probe_ns <= 0)
        return -1;
    double budget = in->budget_pct > 0 ? in->budget_pct : CMR_BUDGET_DEFAULT_PCT;
    double scale = in->scale > 1 ? in->scale : 1, total = 0;
    double agent = in->agent_ns > 0 ? in->agent_ns : 0;
    double per_call = in->probe_ns + agent;          /* what monitoring one call costs */
    double call_cost = scale * in->probe_ns + agent; /* the same per call counted */
    for (size_t i = 0; i < in->n; i++)
        if (counts(in, &in->methods[i]))
            total += (double)in->methods[i].calls * call_cost;
    double cpu = (double)in->cpu_ns;
    out->before_pct = out->after_pct = 100.0 * total / cpu;
    if (out->before_pct <= budget || in->n == 0)
        return 0;
    cand_t *c = calloc(in->n, sizeof *c);
    out->removed = calloc(in->n, sizeof *out->removed);
    if (!c || !out->removed) {
        free(c);
        cmr_budget_result_free(out);
        return -1;
    }
    for (int pass = 0; pass < 2 && out->after_pct > budget; pass++) {
        /* pass 0: monitoring costs more than the method's own time; pass 1: it distorts it by
         * more than 1/CMR_BUDGET_DISTORTION */
        double limit = pass == 0 ? per_call : per_call * CMR_BUDGET_DISTORTION;
        size_t nc = 0;
        for (size_t i = 0; i < in->n; i++) {
            const cmr_budget_method_t *m = &in->methods[i];
            if (!counts(in, m))
                continue;
            double self = (double)(m->self_ns > 0 ? m->self_ns : 0) / (double)m->calls;
            bool first = self < per_call;
            if ((pass == 0 && !first) || (pass == 1 && (first || self >= limit)))
                continue;
            c[nc++] = (cand_t){m, (double)m->calls * call_cost};
        }
        qsort(c, nc, sizeof *c, by_cost_desc);
        for (size_t i = 0; i < nc && out->after_pct > budget; i++) {
            cmr_budget_removal_t *r = &out->removed[out->n_removed++];
            r->method_id = c[i].m->method_id;
            r->calls = (int64_t)((double)c[i].m->calls * scale);
            r->self_ns_per_call = (double)(c[i].m->self_ns > 0 ? c[i].m->self_ns : 0) / (double)c[i].m->calls;
            r->cost_pct = 100.0 * c[i].cost_ns / cpu;
            out->after_pct -= r->cost_pct;
            char cost[64];
            cost_words(in, cost, sizeof cost);
            int len = snprintf(r->reason, sizeof r->reason,
                               pass == 0 ? "%s per call > self time %.1f ns; %lld calls, %.1f%% of CPU"
                                         : "%s per call > 1/10 of self time %.1f ns; %lld calls, %.1f%% of CPU",
                               cost, r->self_ns_per_call, (long long)r->calls, r->cost_pct);
            if (scale > 1.005 && len > 0 && (size_t)len < sizeof r->reason)
                snprintf(r->reason + len, sizeof r->reason - (size_t)len, " (recorded calls x%.2f for those dropped)",
                         scale);
        }
    }
    if (out->after_pct < 0)
        out->after_pct = 0;
    out->over_budget = out->after_pct > budget;
    free(c);
    return 0;
}

void cmr_budget_result_free(cmr_budget_result_t *r)
{
    free(r->removed);
    memset(r, 0, sizeof *r);
}

/* *sum += v for v >= 0 (a negative v, never sent by an agent, adds nothing), saturating:
 * the figures come off a topic anyone with access may write to. */
static void add_count(int64_t *sum, int64_t v)
{
    if (v > 0)
        *sum = v > INT64_MAX - *sum ? INT64_MAX : *sum + v;
}

int cmr_budget_window_add(cmr_budget_window_t *w, const cmr_metric_batch_t *mb)
{
    if (mb->probe_ps > 0) /* even from a batch without CPU time: it belongs to the JVM */
        w->probe_ps = mb->probe_ps < CMR_BUDGET_MIN_PROBE_PS   ? CMR_BUDGET_MIN_PROBE_PS
                      : mb->probe_ps > CMR_BUDGET_MAX_PROBE_PS ? CMR_BUDGET_MAX_PROBE_PS
                                                               : mb->probe_ps;
    if (mb->cpu_ns <= 0)
        return 0;
    add_count(&w->cpu_ns, mb->cpu_ns);
    add_count(&w->samples_dropped, mb->samples_dropped);
    w->intervals++;
    for (size_t i = 0; i < mb->metrics.count; i++) {
        const cmr_method_metric_t *mm = &mb->metrics.items[i];
        if (mm->count <= 0)
            continue;
        size_t at = (size_t)(uintptr_t)cmr_u64map_get(&w->index, (uint64_t)mm->method_id);
        if (at == 0) {
            if (CMR_ARRAY_GROW(w->methods, w->cap, w->n + 1) != 0 ||
                cmr_u64map_put(&w->index, (uint64_t)mm->method_id, (void *)(uintptr_t)(w->n + 1)) != 0)
                return -1;
            w->methods[w->n] = (cmr_budget_method_t){.method_id = (uint64_t)mm->method_id};
            at = ++w->n;
        }
        cmr_budget_method_t *m = &w->methods[at - 1];
        add_count(&m->calls, mm->count);
        add_count(&m->self_ns, mm->self_ns > 0 ? mm->self_ns : mm->sum_ns);
        add_count(&w->calls_recorded, mm->count);
    }
    add_count(&w->calls_dropped, mb->calls_dropped);
    /* the agent's threads are the process's: never more than its CPU time */
    add_count(&w->agent_cpu_ns, mb->agent_cpu_ns < mb->cpu_ns ? mb->agent_cpu_ns : mb->cpu_ns);
    return 0;
}

double cmr_budget_window_scale(const cmr_budget_window_t *w)
{
    if (w->calls_recorded <= 0 || w->calls_dropped <= 0)
        return 1;
    double s = ((double)w->calls_recorded + (double)w->calls_dropped) / (double)w->calls_recorded;
    return s < CMR_BUDGET_MAX_SCALE ? s : CMR_BUDGET_MAX_SCALE;
}

double cmr_budget_window_probe_ns(const cmr_budget_window_t *w, double fallback_ns)
{
    return w->probe_ps > 0 ? (double)w->probe_ps / 1000.0 : fallback_ns;
}

double cmr_budget_window_agent_ns(const cmr_budget_window_t *w)
{
    if (w->calls_recorded < CMR_BUDGET_AGENT_MIN_CALLS || w->agent_cpu_ns <= 0)
        return 0;
    return (double)w->agent_cpu_ns / (double)w->calls_recorded;
}

cmr_budget_input_t cmr_budget_window_input(const cmr_budget_window_t *w, double fallback_probe_ns, double budget_pct)
{
    return (cmr_budget_input_t){.methods = w->methods,
                                .n = w->n,
                                .cpu_ns = w->cpu_ns,
                                .probe_ns = cmr_budget_window_probe_ns(w, fallback_probe_ns),
                                .agent_ns = cmr_budget_window_agent_ns(w),
                                .budget_pct = budget_pct,
                                .scale = cmr_budget_window_scale(w)};
}

void cmr_budget_window_reset(cmr_budget_window_t *w)
{
    w->n = 0;
    w->cpu_ns = w->samples_dropped = w->calls_recorded = w->calls_dropped = w->agent_cpu_ns = 0;
    w->intervals = 0;
    cmr_u64map_clear(&w->index);
}

void cmr_budget_window_free(cmr_budget_window_t *w)
{
    free(w->methods);
    cmr_u64map_free(&w->index);
    memset(w, 0, sizeof *w);
}

size_t cmr_instr_decision_drop(const cmr_instr_meta_t *cls, cmr_instr_decision_t *d, const uint64_t *ids, size_t n)
{
    size_t kept = 0, dropped = 0;
    cf_str owner = {cls->name, (uint32_t)strlen(cls->name)};
    for (size_t i = 0; i < d->n_picks; i++) {
        const cmr_instr_method_t *m = &cls->methods[d->picks[i].method];
        cf_str name = {m->name, (uint32_t)strlen(m->name)}, desc = {m->desc, (uint32_t)strlen(m->desc)};
        if (d->picks[i].handoff == CMR_HANDOFF_NONE && is_listed(ids, n, cf_method_id_of(owner, name, desc))) {
            dropped++;
            continue;
        }
        d->picks[kept++] = d->picks[i];
    }
    d->n_picks = kept;
    return dropped;
}
