/*
 * instr_budget.h - the overhead budget (docs/ARCHITECTURE.md, "The overhead budget"): from
 * what one JVM measured over a window (per method: calls, self time; the cost of one call's
 * probes; the JVM's CPU time), which methods lose their probes so that the probes cost at
 * most the environment's budget, each with its reason.
 *
 * The rule, in order:
 *   1. nothing is removed while the probes cost at most budget_pct of the CPU time;
 *   2. over it, methods whose probes cost more than they measure (self time per call below
 *      the probes' cost per call) are removed, the most expensive in probes first, until
 *      the estimate is under the budget;
 *   3. still over it, methods whose self time per call is under CMR_BUDGET_DISTORTION times
 *      the probes' cost (their figures are distorted by more than 1/CMR_BUDGET_DISTORTION)
 *      go the same way. Methods that measure more than that are never removed: the budget
 *      is then reported as not reachable by removal (over_budget).
 * Pure: no Kafka, no cache; the caller applies the result (cmr_instr_decision_drop).
 */
#ifndef CMR_INSTR_BUDGET_H
#define CMR_INSTR_BUDGET_H

#include <stddef.h>
#include <stdint.h>

#include "cmr/instr_rules.h"

#define CMR_BUDGET_DEFAULT_PCT 3.0
#define CMR_BUDGET_DISTORTION 10

typedef struct cmr_budget_method {
    uint64_t method_id;
    int64_t calls;   /* in the window */
    int64_t self_ns; /* their time outside recorded callees (sum over the calls) */
} cmr_budget_method_t;

typedef struct cmr_budget_input {
    const cmr_budget_method_t *methods;
    size_t n;
    int64_t cpu_ns;    /* the JVM's CPU time over the window (all threads) */
    double probe_ns;   /* the cost of one call's probes (entry + exit), measured by the agent */
    double budget_pct; /* the environment's budget; <= 0: CMR_BUDGET_DEFAULT_PCT */
} cmr_budget_input_t;

typedef struct cmr_budget_removal {
    uint64_t method_id;
    int64_t calls;
    double self_ns_per_call;
    double cost_pct; /* this method's probes, in % of the CPU time */
    char reason[160];
} cmr_budget_removal_t;

typedef struct cmr_budget_result {
    cmr_budget_removal_t *removed; /* owned (cmr_budget_result_free), most expensive first */
    size_t n_removed;
    double before_pct, after_pct; /* the probes' estimated cost before and after, % of CPU */
    int over_budget;              /* after_pct is still over the budget */
} cmr_budget_result_t;

/* 0, or -1 on out of memory / bad input (cpu_ns <= 0 or probe_ns <= 0). */
int cmr_budget_select(const cmr_budget_input_t *in, cmr_budget_result_t *out);
void cmr_budget_result_free(cmr_budget_result_t *r);

/* Takes the picks of methods whose id is in ids (sorted ascending) out of d, the JDK's
 * hand-off points excepted; returns how many were taken out. cls->name is the owner. */
size_t cmr_instr_decision_drop(const cmr_instr_meta_t *cls, cmr_instr_decision_t *d, const uint64_t *ids, size_t n);

#endif
