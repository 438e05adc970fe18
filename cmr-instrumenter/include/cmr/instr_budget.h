/*
 * instr_budget.h - the overhead budget (docs/ARCHITECTURE.md, "The overhead budget"): from
 * what one JVM measured over a window (per method: calls, self time; the cost of one call's
 * probes; the agent's own work per recorded call; the JVM's CPU time), which methods lose
 * their probes so that monitoring costs at most the environment's budget, each with its
 * reason. A call's monitoring cost is its probes (which ran for dropped calls too: scaled)
 * plus the agent's work for it (recorded calls only).
 *
 * The rule, in order:
 *   1. nothing is removed while monitoring costs at most budget_pct of the CPU time;
 *   2. over it, methods whose monitoring costs more than they measure (self time per call
 *      below the probes' and the agent's cost per call) are removed, the most expensive
 *      first, until the estimate is under the budget;
 *   3. still over it, methods whose self time per call is under CMR_BUDGET_DISTORTION times
 *      that cost (their figures are distorted by more than 1/CMR_BUDGET_DISTORTION) go the
 *      same way. Methods that measure more than that are never removed: the budget
 *      is then reported as not reachable by removal (over_budget).
 * The calls counted are scaled by the calls the JVM dropped (its probes ran for those too),
 * and methods removed already are left out of the estimate.
 * Pure: no Kafka, no cache; the caller applies the result (cmr_instr_decision_drop).
 */
#ifndef CMR_INSTR_BUDGET_H
#define CMR_INSTR_BUDGET_H

#include <stddef.h>
#include <stdint.h>

#include "cmr/instr_rules.h"
#include "cmr/map.h"
#include "cmr/msg.h"

#define CMR_BUDGET_DEFAULT_PCT 3.0
#define CMR_BUDGET_DISTORTION 10
#define CMR_BUDGET_MAX_SCALE 100.0
/* a probe cost an agent sends (MetricBatch.probe_ps) is held within these bounds, in ps:
 * the figure comes off a topic, and no JVM's probes cost less than a nanosecond or more
 * than an interpreted call's ten microseconds */
#define CMR_BUDGET_MIN_PROBE_PS 1000
#define CMR_BUDGET_MAX_PROBE_PS 10000000
/* the agent's work counts per call only in a window of at least this many recorded calls:
 * below it, its publisher's CPU is mostly its own fixed work (waking up, sending metrics),
 * which no removal would lower, and spread over a few calls it would make every method
 * look too expensive to keep */
#define CMR_BUDGET_AGENT_MIN_CALLS 100000

typedef struct cmr_budget_method {
    uint64_t method_id;
    int64_t calls;   /* in the window */
    int64_t self_ns; /* their time outside recorded callees (sum over the calls) */
} cmr_budget_method_t;

typedef struct cmr_budget_input {
    const cmr_budget_method_t *methods;
    size_t n;
    int64_t cpu_ns;    /* the JVM's CPU time over the window (all threads) */
    double probe_ns;   /* the cost of one call's probes (entry + exit): what the agent measured,
                        * else the instrumenter's setting (cmr_budget_window_probe_ns) */
    double agent_ns;   /* the agent's own work (publisher thread) per recorded call; 0: none */
    double budget_pct; /* the environment's budget; <= 0: CMR_BUDGET_DEFAULT_PCT */
    /* the calls the probes ran per call counted (>= 1; 0 counts as 1): a JVM that drops
     * records counts only the calls it recorded, and the dropped ones cost probes too
     * (cmr_budget_window_scale) */
    double scale;
    /* methods already removed (sorted ascending; may be NULL): their probes are on their
     * way out, so a window measured before the Redefines landed leaves them out of the
     * estimate instead of making the choice take more */
    const uint64_t *removed;
    size_t n_removed;
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

/* One JVM's measurements over a window of metric intervals (its MetricBatches on
 * cmr.metrics): per method the calls and self time (MethodMetric.self_ns; an agent that
 * does not send it counts the whole time, sum_ns, so its methods look as costly as they
 * can), and the process's CPU time (MetricBatch.cpu_ns). A batch without cpu_ns (an
 * agent's first, or an older agent) is left out entirely: its methods' time cannot be set
 * against anything. The JVM's probe cost (MetricBatch.probe_ps) is kept across resets: it
 * belongs to the JVM, not to a window. Owns its memory. */
typedef struct cmr_budget_window {
    cmr_budget_method_t *methods; /* owned */
    size_t n, cap;
    cmr_u64map_t index; /* method id -> position + 1 */
    int64_t cpu_ns;
    int64_t samples_dropped;
    int64_t calls_recorded; /* the methods' calls, summed */
    int64_t calls_dropped;  /* MetricBatch.calls_dropped, summed */
    int64_t agent_cpu_ns;   /* MetricBatch.agent_cpu_ns, summed */
    uint32_t intervals;     /* batches counted */
    int64_t probe_ps;       /* the last probe cost the JVM sent, bounded (0: none yet) */
    int64_t last_ms;        /* when the last batch arrived (the caller's clock): a JVM gone
                           quiet for long has its window freed */
} cmr_budget_window_t;

/* 0, or -1 on out of memory (the window is then partly updated: reset it). */
int cmr_budget_window_add(cmr_budget_window_t *w, const cmr_metric_batch_t *mb);
/* The calls the probes ran per call the window counted: (recorded + dropped) / recorded,
 * at most CMR_BUDGET_MAX_SCALE; 1 without drops. */
double cmr_budget_window_scale(const cmr_budget_window_t *w);
/* The cost of one call's probes in this JVM, in ns: what it measured (w->probe_ps), else
 * fallback_ns (the instrumenter's setting, for agents that do not measure it). */
double cmr_budget_window_probe_ns(const cmr_budget_window_t *w, double fallback_ns);
/* The agent's work per recorded call over the window: agent_cpu_ns / calls_recorded, 0
 * without either or under CMR_BUDGET_AGENT_MIN_CALLS recorded calls. */
double cmr_budget_window_agent_ns(const cmr_budget_window_t *w);
/* What cmr_budget_select needs, borrowing w's methods (scaled by its drops; the probes'
 * cost by cmr_budget_window_probe_ns, the agent's by cmr_budget_window_agent_ns; nothing
 * listed as removed: the caller sets removed, n_removed). */
cmr_budget_input_t cmr_budget_window_input(const cmr_budget_window_t *w, double fallback_probe_ns, double budget_pct);
void cmr_budget_window_reset(cmr_budget_window_t *w);
void cmr_budget_window_free(cmr_budget_window_t *w);

/* Takes the picks of methods whose id is in ids (sorted ascending) out of d, the JDK's
 * hand-off points excepted; returns how many were taken out. cls->name is the owner. */
size_t cmr_instr_decision_drop(const cmr_instr_meta_t *cls, cmr_instr_decision_t *d, const uint64_t *ids, size_t n);

#endif
